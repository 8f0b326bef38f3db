import Foundation
import Glibc
import HTTP

/// `token-registry probe [--path /healthz] [--port P] [--host H] [--timeout-ms 2000]`: a health check the container
/// runs against its own process, so the image needs no curl. Sends one `GET` to the service's listen address (`HOST`,
/// as `serve` reads it; 127.0.0.1 when that is a wildcard or `localhost`) and exits 0 on a 200 answer, 1 on any other
/// answer, refusal or time-out (printing why on standard error).
enum Probe {
    static func run(_ arguments: Arguments) throws -> Int32 {
        try arguments.allow(["path", "port", "host", "timeout-ms"])
        let path = arguments.options["path"] ?? "/healthz"
        guard path.hasPrefix("/"), path.utf8.count <= 256, !path.contains(where: { $0.isWhitespace }) else {
            throw CLIError("--path must be an absolute path without spaces")
        }
        let portText = arguments.options["port"] ?? ProcessInfo.processInfo.environment["PORT"] ?? "8080"
        guard let port = UInt16(portText), port > 0 else { throw CLIError("--port must be 1-65535") }
        guard let timeout = Int(arguments.options["timeout-ms"] ?? "2000"), (1...60_000).contains(timeout) else {
            throw CLIError("--timeout-ms must be 1-60000")
        }
        let host = target(listening: arguments.options["host"] ?? ProcessInfo.processInfo.environment["HOST"] ?? "")
        do {
            let status = try get(path: path, host: host, port: port, timeoutMillis: timeout)
            if status == 200 { return 0 }
            FileHandle.standardError.write(Data("probe: \(path) answered \(status)\n".utf8))
        } catch let error as CLIError {
            FileHandle.standardError.write(Data("probe: \(error.description)\n".utf8))
        }
        return 1
    }

    /// Where to reach a service listening on `host`: the address itself, or 127.0.0.1 for the wildcards (`0.0.0.0`,
    /// `::`, which takes IPv4 too), `localhost` and no host at all. Brackets around IPv6 are dropped.
    static func target(listening host: String) -> String {
        var text = host
        if text.hasPrefix("["), text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        return ["", "0.0.0.0", "::", "localhost"].contains(text) ? "127.0.0.1" : text
    }

    /// The status code of `GET path` on host:port (an IPv4 or IPv6 literal).
    static func get(path: String, host: String = "127.0.0.1", port: UInt16, timeoutMillis: Int) throws -> Int {
        guard let address = SocketAddress(host: host, port: Int(port)) else {
            throw CLIError("--host \(host): not an IP address")
        }
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw CLIError("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var limit = timeval(tv_sec: timeoutMillis / 1000, tv_usec: (timeoutMillis % 1000) * 1000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        let connected = address.withSockaddr { connect(fd, $0, $1) }
        guard connected == 0 else {
            throw CLIError("connect to \(host) port \(port): \(String(cString: strerror(errno)))")
        }
        let authority = address.family == AF_INET6 ? "[\(host)]" : host
        let request = Array("GET \(path) HTTP/1.1\r\nHost: \(authority)\r\nConnection: close\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count
        else { throw CLIError("send: \(String(cString: strerror(errno)))") }
        var head = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 512)
        while !head.contains(UInt8(ascii: "\n")) && head.count < 4096 {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else {
                throw CLIError(n == 0 ? "the connection closed before an answer" : "no answer in \(timeoutMillis) ms")
            }
            head += buffer[0..<n]
        }
        // "HTTP/1.1 200 OK"
        let line = String(decoding: head.prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        let parts = line.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw CLIError("not an HTTP answer")
        }
        return status
    }
}
