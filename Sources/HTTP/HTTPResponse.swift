import Synchronization

/// A body produced after the head, piece by piece: the event loop sends each piece as it comes (chunked on HTTP/1.1,
/// until the connection closes on HTTP/1.0), and a write waits while the connection's unsent output is at its bound,
/// so a slow reader slows the producer instead of filling memory. A producer that throws ends the connection without
/// the last chunk: the client sees the body cut short, never a complete-looking one.
public struct ResponseBody: Sendable {
    public let produce: @Sendable (ResponseBodyWriter) async throws -> Void

    public init(_ produce: @escaping @Sendable (ResponseBodyWriter) async throws -> Void) { self.produce = produce }
}

/// Where a ``ResponseBody`` writes.
public struct ResponseBodyWriter: Sendable {
    let send: @Sendable ([UInt8]) async throws -> Void

    public init(_ send: @escaping @Sendable ([UInt8]) async throws -> Void) { self.send = send }

    /// Sends `bytes` (none: nothing); throws once the connection is gone.
    public func write(_ bytes: [UInt8]) async throws {
        guard !bytes.isEmpty else { return }
        try await send(bytes)
    }
}

/// A response to write: status, headers and the whole body, or a head and a ``ResponseBody`` streamed after it.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// Set: the body is this, streamed (``body`` is ignored).
    public var stream: ResponseBody?

    public init(status: Int, headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public init(status: Int, contentType: String, body: String) {
        self.init(status: status, headers: ["content-type": contentType], body: Array(body.utf8))
    }

    /// The head and body as bytes on the wire. `Content-Length` is set from the body (but for a 204, which has none);
    /// `keepAlive` false adds `Connection: close`; `omitBody` serves HEAD.
    public func serialized(version: HTTPVersion, keepAlive: Bool, omitBody: Bool = false) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(128 + body.count)
        appendStatusLine(version, to: &out)
        for (name, value) in headers.fields where name != "content-length" && name != "connection" {
            out.append(contentsOf: name.utf8)
            out.append(contentsOf: ": ".utf8)
            out.append(contentsOf: value.utf8)
            out.append(contentsOf: "\r\n".utf8)
        }
        // A 1xx or 204 answer has no content and must not carry Content-Length (RFC 9110, 8.6); 304 is never sent.
        let hasContent = status >= 200 && status != 204
        if hasContent {
            out.append(contentsOf: "content-length: ".utf8)
            HTTPResponse.appendDecimal(body.count, to: &out)
            out.append(contentsOf: "\r\n".utf8)
        }
        if !keepAlive {
            out.append(contentsOf: "connection: close\r\n".utf8)
        } else if version == .http1_0 {
            out.append(contentsOf: "connection: keep-alive\r\n".utf8)
        }
        out.append(contentsOf: "\r\n".utf8)
        if !omitBody && hasContent { out.append(contentsOf: body) }
        return out
    }

    /// The head of a streamed response: no `Content-Length`; `Transfer-Encoding: chunked` on HTTP/1.1, and on HTTP/1.0
    /// the body ends when the connection closes.
    public func serializedStreamHead(version: HTTPVersion, keepAlive: Bool) -> [UInt8] {
        var out = [UInt8]()
        appendStatusLine(version, to: &out)
        for (name, value) in headers.fields
        where name != "content-length" && name != "connection" && name != "transfer-encoding" {
            out.append(contentsOf: "\(name): \(value)\r\n".utf8)
        }
        if version == .http1_1 { out.append(contentsOf: "transfer-encoding: chunked\r\n".utf8) }
        out.append(contentsOf: (keepAlive ? "\r\n" : "connection: close\r\n\r\n").utf8)
        return out
    }

    /// `HTTP/1.1 200 OK\r\n`.
    private func appendStatusLine(_ version: HTTPVersion, to out: inout [UInt8]) {
        out.append(contentsOf: version.text.utf8)
        out.append(UInt8(ascii: " "))
        HTTPResponse.appendDecimal(status, to: &out)
        out.append(UInt8(ascii: " "))
        out.append(contentsOf: HTTPResponse.reasonPhrase(status).utf8)
        out.append(contentsOf: "\r\n".utf8)
    }

    /// One chunk of a chunked body.
    static func chunk(_ bytes: [UInt8]) -> [UInt8] {
        var out = Array(String(bytes.count, radix: 16).utf8)
        out.append(contentsOf: [13, 10])
        out.append(contentsOf: bytes)
        out.append(contentsOf: [13, 10])
        return out
    }

    static let lastChunk = Array("0\r\n\r\n".utf8)

    /// The whole body: ``body``, or what ``stream`` produces, gathered (for callers without a socket).
    public func collectedBody() async throws -> [UInt8] {
        guard let stream else { return body }
        let gathered = GatheredBody()
        try await stream.produce(ResponseBodyWriter { gathered.append($0) })
        return gathered.bytes
    }

    /// A non-negative number in decimal, written without string interpolation (this runs for every response).
    static func appendDecimal(_ value: Int, to out: inout [UInt8]) {
        guard value >= 10 else {
            out.append(UInt8(ascii: "0") + UInt8(max(0, value)))
            return
        }
        appendDecimal(value / 10, to: &out)
        out.append(UInt8(ascii: "0") + UInt8(value % 10))
    }

    public static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 100: return "Continue"
        case 200: return "OK"
        case 201: return "Created"
        case 202: return "Accepted"
        case 204: return "No Content"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 409: return "Conflict"
        case 411: return "Length Required"
        case 412: return "Precondition Failed"
        case 413: return "Content Too Large"
        case 414: return "URI Too Long"
        case 415: return "Unsupported Media Type"
        case 417: return "Expectation Failed"
        case 429: return "Too Many Requests"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 503: return "Service Unavailable"
        case 505: return "HTTP Version Not Supported"
        default: return "Status \(status)"
        }
    }
}

/// A streamed body gathered in memory (``HTTPResponse/collectedBody()``).
final class GatheredBody: Sendable {
    private let storage = Mutex<[UInt8]>([])

    func append(_ bytes: [UInt8]) { storage.withLock { $0.append(contentsOf: bytes) } }
    var bytes: [UInt8] { storage.withLock { $0 } }
}
