import Foundation
import Glibc
import JSON

/// Structured JSON logs, one line per event on standard output. Request lines (``request(id:method:route:status:
/// microseconds:)``) go through a ``LogBuffer`` when the logger has one (the service does: ``buffered(level:)``);
/// every other line is written at once, after the request lines gathered before it.
///
/// Nothing secret is passed here: request lines carry the route template, never the raw path (paths can hold
/// registration tokens), and store errors arrive without the database's DETAIL lines, which quote key values.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable {
        case debug, info, warning, error

        public init?(name: String) {
            switch name.lowercased() {
            case "debug", "trace": self = .debug
            case "info": self = .info
            case "warn", "warning": self = .warning
            case "error": self = .error
            default: return nil
            }
        }

        var name: String { ["debug", "info", "warning", "error"][rawValue] }

        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
    }

    public let level: Level
    private let sink: @Sendable ([UInt8]) -> Void
    private let buffer: LogBuffer?

    /// Writes every line at once (commands, tests).
    public init(level: Level, sink: (@Sendable ([UInt8]) -> Void)? = nil) {
        self.level = level
        self.sink = sink ?? Logger.standardOutput
        buffer = nil
    }

    /// Gathers request lines in a ``LogBuffer`` (64 KiB, flushed every `flushInterval`); other lines at once.
    public static func buffered(
        level: Level, flushInterval: Duration = .seconds(1), sink: (@Sendable ([UInt8]) -> Void)? = nil
    ) -> Logger {
        Logger(
            level: level, sink: sink ?? Logger.standardOutput,
            buffer: LogBuffer(interval: flushInterval, write: sink ?? Logger.standardOutput))
    }

    private init(level: Level, sink: @escaping @Sendable ([UInt8]) -> Void, buffer: LogBuffer) {
        self.level = level
        self.sink = sink
        self.buffer = buffer
    }

    /// Writes all of `bytes` to standard output, whatever a short write or a signal does.
    @Sendable static func standardOutput(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(1, raw.baseAddress! + offset, raw.count - offset)
                if n > 0 {
                    offset += n
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    return  // standard output is gone: nothing more can be logged
                }
            }
        }
    }

    /// Writes the request lines gathered so far and stops the flush timer (at shutdown).
    public func close() { buffer?.close() }

    public func log(_ level: Level, _ message: String, _ fields: [(String, JSONValue)] = []) {
        guard level >= self.level else { return }
        var members: [(String, JSONValue)] = [
            ("time", .string(Logger.timestamp())), ("level", .string(level.name)), ("msg", .string(message)),
        ]
        members.append(contentsOf: fields)
        let line = JSONValue.object(members).encoded() + [0x0a]
        if let buffer { buffer.writeThrough(line) } else { sink(line) }
    }

    /// The request log line, at `info`: built straight into bytes (it is written once per request) and gathered
    /// in the buffer when there is one.
    public func request(
        id: String, traceID: String? = nil, method: String, route: String, status: Int, microseconds: Int
    ) {
        guard level <= .info else { return }
        var line = [UInt8]()
        line.reserveCapacity(200)
        line.append(contentsOf: #"{"time":""#.utf8)
        Logger.appendTimestamp(to: &line)
        line.append(contentsOf: #"","level":"info","msg":"request","requestId":"#.utf8)
        JSONValue.appendString(id, to: &line)
        if let traceID {
            line.append(contentsOf: #","traceId":"#.utf8)
            JSONValue.appendString(traceID, to: &line)
        }
        line.append(contentsOf: #","method":"#.utf8)
        JSONValue.appendString(method, to: &line)
        line.append(contentsOf: #","route":"#.utf8)
        JSONValue.appendString(route, to: &line)
        line.append(contentsOf: #","status":"#.utf8)
        Logger.appendDigits(status, width: 1, to: &line)
        line.append(contentsOf: #","durationMs":"#.utf8)
        Logger.appendDigits(max(0, microseconds) / 1000, width: 1, to: &line)
        line.append(UInt8(ascii: "."))
        Logger.appendDigits(max(0, microseconds) % 1000, width: 3, to: &line)
        line.append(contentsOf: "}\n".utf8)
        if let buffer { buffer.append(line) } else { sink(line) }
    }

    public func info(_ message: String, _ fields: [(String, JSONValue)] = []) { log(.info, message, fields) }
    public func warning(_ message: String, _ fields: [(String, JSONValue)] = []) { log(.warning, message, fields) }
    public func error(_ message: String, _ fields: [(String, JSONValue)] = []) { log(.error, message, fields) }

    static func timestamp() -> String {
        var bytes = [UInt8]()
        appendTimestamp(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `2026-11-30T19:05:43.123Z`, written without Foundation or string interpolation.
    static func appendTimestamp(to out: inout [UInt8]) {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        var seconds = ts.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        appendDigits(Int(parts.tm_year) + 1900, width: 4, to: &out)
        out.append(UInt8(ascii: "-"))
        appendDigits(Int(parts.tm_mon) + 1, width: 2, to: &out)
        out.append(UInt8(ascii: "-"))
        appendDigits(Int(parts.tm_mday), width: 2, to: &out)
        out.append(UInt8(ascii: "T"))
        appendDigits(Int(parts.tm_hour), width: 2, to: &out)
        out.append(UInt8(ascii: ":"))
        appendDigits(Int(parts.tm_min), width: 2, to: &out)
        out.append(UInt8(ascii: ":"))
        appendDigits(Int(parts.tm_sec), width: 2, to: &out)
        out.append(UInt8(ascii: "."))
        appendDigits(ts.tv_nsec / 1_000_000, width: 3, to: &out)
        out.append(UInt8(ascii: "Z"))
    }

    /// The decimal digits of a non-negative `value`, zero-padded to `width`.
    static func appendDigits(_ value: Int, width: Int, to out: inout [UInt8]) { Timestamp.digits(value, width, &out) }

}
