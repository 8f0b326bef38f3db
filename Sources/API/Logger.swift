import Foundation
import Glibc
import JSON

/// Structured JSON logs, one line per event on standard output, written with a single `write` each.
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

    public init(level: Level, sink: (@Sendable ([UInt8]) -> Void)? = nil) {
        self.level = level
        self.sink = sink ?? { bytes in bytes.withUnsafeBytes { _ = Glibc.write(1, $0.baseAddress, $0.count) } }
    }

    public func log(_ level: Level, _ message: String, _ fields: [(String, JSONValue)] = []) {
        guard level >= self.level else { return }
        var members: [(String, JSONValue)] = [
            ("time", .string(Logger.timestamp())), ("level", .string(level.name)), ("msg", .string(message)),
        ]
        members.append(contentsOf: fields)
        sink(JSONValue.object(members).encoded() + [0x0a])
    }

    public func info(_ message: String, _ fields: [(String, JSONValue)] = []) { log(.info, message, fields) }
    public func warning(_ message: String, _ fields: [(String, JSONValue)] = []) { log(.warning, message, fields) }
    public func error(_ message: String, _ fields: [(String, JSONValue)] = []) { log(.error, message, fields) }

    static func timestamp() -> String {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        var seconds = ts.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ v: Int, _ n: Int) -> String {
            let s = String(v); return String(repeating: "0", count: max(0, n - s.count)) + s
        }
        return "\(pad(Int(parts.tm_year) + 1900, 4))-\(pad(Int(parts.tm_mon) + 1, 2))-\(pad(Int(parts.tm_mday), 2))T"
            + "\(pad(Int(parts.tm_hour), 2)):\(pad(Int(parts.tm_min), 2)):\(pad(Int(parts.tm_sec), 2)).\(pad(ts.tv_nsec / 1_000_000, 3))Z"
    }
}
