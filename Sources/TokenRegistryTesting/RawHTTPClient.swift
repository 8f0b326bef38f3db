import Dispatch
import Foundation
import Glibc
import HTTP

/// A response as the test client read it off the socket.
public struct RawResponse: Sendable {
    public let status: Int
    public let headers: [(name: String, value: String)]
    public let body: [UInt8]

    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// A blocking TCP client for tests that need exact bytes on the wire (pipelining, smuggling shapes, slow
/// clients). Every call runs on a Dispatch thread, never on the cooperative pool, which the server under test
/// needs for its own handlers.
public final class RawHTTPClient: @unchecked Sendable {
    // @unchecked Sendable: the descriptor and buffer are used by one test at a time, serially.
    public let fd: Int32
    private var pending: [UInt8] = []

    /// Connects to `host:port` (an IPv4 or IPv6 literal; 127.0.0.1 unless told) with a receive timeout.
    public init(port: Int, host: String = "127.0.0.1", timeout: Double = 10) throws {
        guard let address = SocketAddress(host: host, port: port) else { throw POSIXError(.EINVAL) }
        fd = socket(address.family, Int32(SOCK_STREAM.rawValue), 0)
        let ok = address.withSockaddr { connect(fd, $0, $1) }
        guard ok == 0 else {
            // No close here: the instance is fully initialised, so deinit runs and closes the descriptor. Closing
            // it twice would close whatever socket reused the number meanwhile (seen as EBADF in other tests).
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .ECONNREFUSED)
        }
        setTimeout(timeout)
    }

    deinit { close(fd) }

    public func setTimeout(_ seconds: Double) {
        var tv = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Sends raw bytes.
    public func send(_ bytes: [UInt8]) async throws {
        try await offPool {
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeBytes {
                    Glibc.send(self.fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
                }
                guard n > 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EPIPE) }
                offset += n
            }
        }
    }

    public func send(_ text: String) async throws { try await send(Array(text.utf8)) }

    /// Shuts down the write side (the server sees end of input).
    public func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

    /// Makes the socket's close a reset (`SO_LINGER` 0): the server sees the connection fail at once, whatever it
    /// was doing for it. Close it by dropping the client.
    public func resetOnClose() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    }

    /// Reads one response; `nil` when the server closed the connection before sending one.
    public func readResponse(headRequest: Bool = false) async throws -> RawResponse? {
        try await offPool { try self.readResponseBlocking(headRequest: headRequest) }
    }

    /// True when the server has closed the connection (a read returns end of input) within the timeout.
    public func isClosedByServer() async -> Bool {
        (try? await offPool { () -> Bool in
            var byte: UInt8 = 0
            while true {
                let n = recv(self.fd, &byte, 1, 0)
                if n == 0 { return true }
                if n < 0 { return errno == ECONNRESET }
            }
        }) ?? false
    }

    private func fill() throws -> Bool {
        var buffer = [UInt8](repeating: 0, count: 65536)
        let n = recv(fd, &buffer, buffer.count, 0)
        if n > 0 {
            pending.append(contentsOf: buffer[0..<n])
            return true
        }
        if n == 0 || errno == ECONNRESET { return false }
        throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .ETIMEDOUT)
    }

    private func readResponseBlocking(headRequest: Bool) throws -> RawResponse? {
        while true {
            if let end = findHeadEnd() {
                let head = String(decoding: pending[0..<end], as: UTF8.self)
                var lines = head.components(separatedBy: "\r\n")
                let statusLine = lines.removeFirst().split(separator: " ")
                let status = Int(statusLine[1]) ?? 0
                let headers = lines.compactMap { line -> (String, String)? in
                    guard let colon = line.firstIndex(of: ":") else { return nil }
                    return (
                        String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                    )
                }
                func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name }?.1 }
                if !headRequest, status != 100, header("transfer-encoding")?.lowercased() == "chunked" {
                    pending.removeFirst(end + 4)
                    guard let body = try readChunks() else { return nil }
                    return RawResponse(status: status, headers: headers, body: body)
                }
                if !headRequest, status != 100, header("content-length") == nil,
                    header("connection")?.lowercased() == "close"
                {
                    // Delimited by the close (a streamed answer to HTTP/1.0).
                    while try fill() {}
                    let body = Array(pending[(end + 4)...])
                    pending.removeAll()
                    return RawResponse(status: status, headers: headers, body: body)
                }
                let length =
                    headRequest || status == 100
                    ? 0 : Int(header("content-length") ?? "0") ?? 0
                while pending.count < end + 4 + length {
                    guard try fill() else { return nil }
                }
                let body = Array(pending[(end + 4)..<(end + 4 + length)])
                pending.removeFirst(end + 4 + length)
                if status == 100 { continue }
                return RawResponse(status: status, headers: headers, body: body)
            }
            guard try fill() else { return nil }
        }
    }

    /// A chunked body, decoded; nil when the connection ends before its last chunk (a cut body).
    private func readChunks() throws -> [UInt8]? {
        var body: [UInt8] = []
        while true {
            var lineEnd: Int?
            while lineEnd == nil {
                lineEnd = pending.indices.dropLast().first { pending[$0] == 13 && pending[$0 + 1] == 10 }
                if lineEnd == nil { guard try fill() else { return nil } }
            }
            let sizeText = String(decoding: pending[0..<lineEnd!], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else { return nil }
            let start = lineEnd! + 2
            while pending.count < start + size + 2 { guard try fill() else { return nil } }
            body.append(contentsOf: pending[start..<(start + size)])
            pending.removeFirst(start + size + 2)
            if size == 0 { return body }
        }
    }

    private func findHeadEnd() -> Int? {
        guard pending.count >= 4 else { return nil }
        for i in 0...(pending.count - 4)
        where pending[i] == 13 && pending[i + 1] == 10 && pending[i + 2] == 13 && pending[i + 3] == 10 {
            return i
        }
        return nil
    }

    /// A whole request/response exchange on a new connection.
    public static func exchange(port: Int, host: String = "127.0.0.1", _ request: String) async throws -> RawResponse? {
        let client = try RawHTTPClient(port: port, host: host)
        try await client.send(request)
        return try await client.readResponse()
    }
}

/// Runs blocking work on a thread of its own and resumes the caller with its result. (Dispatch's global queue
/// runs only as many blocking items at once as there are cores, so parallel tests waiting in `recv` on it would
/// queue behind each other.)
public func offPool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try work() })
        }
        thread.stackSize = 256 * 1024
        thread.start()
    }
}
