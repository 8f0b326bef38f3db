/// A strict, incremental HTTP/1.1 request parser (RFC 9112) with no I/O.
///
/// Feed bytes with ``append(_:)`` and pull events with ``next()``. After an error the parser stays failed:
/// the connection must answer the error and close, because framing can no longer be trusted.
public struct HTTPParser {
    public enum Event: Equatable {
        /// More bytes are needed.
        case needMore
        /// The client sent `Expect: 100-continue` and waits for a `100 Continue` before the body.
        case expectContinue
        case request(HTTPRequest)
        case error(HTTPParseError)

        public static func == (lhs: Event, rhs: Event) -> Bool {
            switch (lhs, rhs) {
            case (.needMore, .needMore), (.expectContinue, .expectContinue): return true
            case let (.request(a), .request(b)): return a.method == b.method && a.target == b.target && a.body == b.body
            case let (.error(a), .error(b)): return a == b
            default: return false
            }
        }
    }

    struct Head {
        var method: String
        var target: String
        var version: HTTPVersion
        var headers: HTTPHeaders
    }

    enum ChunkPhase { case size, data(Int), dataEnd, trailers(Int) }

    enum State {
        case head
        case fixed(Head, remaining: Int)
        case chunked(Head, ChunkPhase)
        case failed(HTTPParseError)
    }

    public let limits: HTTPLimits
    var buffer: [UInt8] = []
    var position = 0
    /// How far the pending head has been searched or checked, so each read costs only its new bytes (a head that
    /// trickles in one byte at a time must not be re-scanned from its start every time).
    private var scanned = 0
    private var headChecked = 0
    private var lineEndScanned = 0
    private var lineEnd: Int?
    /// Whether the pending head's request line, complete before the rest of the head, was found valid.
    private var requestLineChecked = false
    var state: State = .head
    var body: [UInt8] = []
    private var continueRequested = false
    /// Bytes of a chunked body's chunk extensions so far (``maxChunkExtensionBytes`` at most).
    var chunkExtensionBytes = 0
    static let maxChunkExtensionBytes = 64 * 1024
    /// Bytes after `position` already searched for the LF that ends a chunk-size or trailer line, so that a line
    /// trickling in is searched only in its new bytes (an offset from `position`: it survives the buffer's trimming).
    var pendingLineScanned = 0

    public init(limits: HTTPLimits = HTTPLimits()) { self.limits = limits }

    /// Bytes received but not yet consumed by a complete request.
    public var bufferedBytes: Int { buffer.count - position }

    /// Bytes the request in progress holds: its unparsed input and its body so far.
    public var heldBytes: Int { bufferedBytes + body.count }

    /// The bytes the request whose body is being received will hold once whole: its declared length (and what is
    /// buffered), or, for a chunked body, the largest body and its framing; nil before a body (a head, or requests
    /// pipelined behind one being handled, are bound by the allowance instead).
    public var bytesNeeded: Int? {
        switch state {
        case .head: return nil
        case let .fixed(_, remaining): return heldBytes + remaining
        case .chunked: return max(heldBytes, limits.maxBodyBytes + HTTPParser.maxChunkExtensionBytes)
        case .failed: return nil
        }
    }

    /// True when a request has started to arrive (some of its bytes are buffered or parsed).
    public var isMidRequest: Bool {
        if case .head = state { return bufferedBytes > 0 }
        return true
    }

    public mutating func append(_ bytes: some Collection<UInt8>) {
        if position > 0 && position == buffer.count {
            emptyBuffer()
            resetScans()
        } else if position >= HTTPParser.consumedBytesKept {
            // Parsed bytes are dropped as they pile up: a buffer whose reads each end part-way through a line never
            // empties, and it kept every byte parsed before (a gigabyte of chunk extensions under a 1 MiB body, or
            // of empty lines before a request line, each read ending on a CR).
            dropParsedBytes()
        }
        buffer.append(contentsOf: bytes)
    }

    /// Bytes parsed and still held (they are dropped once there are ``consumedBytesKept`` of them).
    public var parsedBytesHeld: Int { position }

    /// Moves the unparsed bytes to the buffer's start; the pending head's scans move with them.
    private mutating func dropParsedBytes() {
        let dropped = position
        let stale = scanned < position
        buffer.removeFirst(dropped)
        position = 0
        if stale {
            resetScans()
        } else {
            scanned -= dropped
            headChecked = max(0, headChecked - dropped)
            lineEndScanned = max(0, lineEndScanned - dropped)
            lineEnd = lineEnd.flatMap { $0 >= dropped ? $0 - dropped : nil }
        }
    }

    /// Parsed bytes the buffer may hold before they are dropped (``append(_:)``).
    static let consumedBytesKept = 4 * 1024
    /// Capacity an empty buffer keeps for the connection's next request (requests are a few hundred bytes to a few
    /// kilobytes); a larger one (a body of a megabyte) is released, so an idle keep-alive connection does not hold the
    /// size of its largest request. 16 KiB: at 64 KiB, input and output together, ten thousand idle connections that
    /// each once sent a 60 KB body held over a gigabyte (an attacker's review).
    static let capacityKept = 16 * 1024

    private mutating func emptyBuffer() {
        buffer.removeAll(keepingCapacity: buffer.capacity <= HTTPParser.capacityKept)
        position = 0
    }

    /// Advances the parser as far as the buffered bytes allow.
    public mutating func next() -> Event {
        while true {
            switch state {
            case let .failed(error):
                return .error(error)
            case .head:
                switch parseHead() {
                case .needMore: return .needMore
                case let .error(e): return fail(e)
                case let .request(r): return .request(r)
                case .expectContinue: return .expectContinue
                }
            case let .fixed(head, remaining):
                let available = buffer.count - position
                let take = min(available, remaining)
                if take > 0 {
                    body.append(contentsOf: buffer[position..<position + take])
                    position += take
                }
                if take == remaining { return finish(head) }
                state = .fixed(head, remaining: remaining - take)
                return requestContinueIfNeeded(head)
            case let .chunked(head, phase):
                switch stepChunked(head, phase) {
                case .progress: continue
                case .needMore: return requestContinueIfNeeded(head)
                case let .error(e): return fail(e)
                case .done: return finish(head)
                }
            }
        }
    }

    private mutating func fail(_ error: HTTPParseError) -> Event {
        state = .failed(error)
        return .error(error)
    }

    private mutating func requestContinueIfNeeded(_ head: Head) -> Event {
        if !continueRequested, head.version == .http1_1,
            head.headers["expect"]?.lowercased() == "100-continue"
        {
            continueRequested = true
            return .expectContinue
        }
        return .needMore
    }

    private mutating func finish(_ head: Head) -> Event {
        var headers = head.headers
        // A GET or HEAD has no content a route reads (RFC 9110, 9.3.1): a body sent with one is read off the wire
        // and dropped, never inflated or kept. A kilobyte of gzip inflated to the body limit and was held for the
        // whole of a 30 s long-poll.
        let content = head.method == "GET" || head.method == "HEAD" ? [] : body
        var decoded = content
        do {
            decoded = try ContentDecoding.decode(body: content, headers: &headers, limit: limits.maxBodyBytes)
        } catch {
            return fail(error)
        }
        let request = HTTPRequest(
            method: head.method, target: head.target, version: head.version,
            headers: headers, body: decoded)
        state = .head
        body = []
        continueRequested = false
        chunkExtensionBytes = 0
        pendingLineScanned = 0
        // Pipelined bytes after this request stay where they are: the next append drops what is parsed.
        if position == buffer.count { emptyBuffer() }
        resetScans()
        return .request(request)
    }

    // MARK: - Head

    private enum HeadResult { case needMore, error(HTTPParseError), request(HTTPRequest), expectContinue }

    private mutating func parseHead() -> HeadResult {
        // RFC 9112 §2.2: ignore empty lines before the request line.
        while position + 1 < buffer.count, buffer[position] == 0x0d, buffer[position + 1] == 0x0a { position += 2 }
        if scanned < position { resetScans() }
        guard let end = findHeadEnd() else {
            let pending = buffer.count - position
            if let lineEnd = requestLineEnd() {
                if lineEnd - position > limits.maxRequestLineBytes + 1 {
                    return .error(HTTPParseError(414, "request line longer than \(limits.maxRequestLineBytes) bytes"))
                }
                if pending - (lineEnd - position) > limits.maxHeaderBytes + 4 {
                    return .error(HTTPParseError(431, "header section larger than \(limits.maxHeaderBytes) bytes"))
                }
            } else if pending > limits.maxRequestLineBytes + 2 {
                return .error(HTTPParseError(414, "request line longer than \(limits.maxRequestLineBytes) bytes"))
            }
            // A bare LF or NUL makes the head invalid as soon as it arrives; do not wait for more. Only the new
            // bytes are checked (and the one before them: a CR whose LF had not arrived yet).
            if let e = checkHeadBytes(max(position, headChecked - 1)..<buffer.count, complete: false) {
                return .error(e)
            }
            headChecked = buffer.count
            // Nor does a request line that cannot be valid (HTTP/0.9's `GET /`, a TLS handshake on the plain port):
            // it is answered once its line ends, or at its first byte when that cannot begin a method.
            if !requestLineChecked {
                if let lineEnd = requestLineEnd() {
                    if case let .failure(e) = parseRequestLine(position..<lineEnd - 1) { return .error(e) }
                    requestLineChecked = true
                } else if position < buffer.count, buffer[position] != 0x0d, !HTTPParser.isTokenChar(buffer[position]) {
                    return .error(HTTPParseError(400, "malformed request line"))
                }
            }
            return .needMore
        }
        if let e = checkHeadBytes(position..<end, complete: true) { return .error(e) }
        let head: Head
        switch buildHead(position..<end) {
        case let .success(h): head = h
        case let .failure(e): return .error(e)
        }
        position = end + 4
        resetScans()
        // Framing (RFC 9112 §6): reject every shape that lets two parsers disagree.
        let te = head.headers.values("transfer-encoding")
        let cl = head.headers.values("content-length")
        if !te.isEmpty {
            guard cl.isEmpty else {
                return .error(HTTPParseError(400, "both Content-Length and Transfer-Encoding are present"))
            }
            guard head.version == .http1_1 else { return .error(HTTPParseError(400, "Transfer-Encoding in HTTP/1.0")) }
            guard te.count == 1, te[0].lowercased() == "chunked" else {
                return .error(HTTPParseError(400, "only the chunked transfer coding is supported"))
            }
        }
        if let e = checkExpect(head) { return .error(e) }
        if !te.isEmpty {
            state = .chunked(head, .size)
            return mapEvent(next())
        }
        var length = 0
        if !cl.isEmpty {
            guard cl.count == 1 else { return .error(HTTPParseError(400, "repeated Content-Length")) }
            let text = cl[0]
            guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                let n = Int(text)
            else { return .error(HTTPParseError(400, "invalid Content-Length")) }
            length = n
        }
        if length > limits.maxBodyBytes {
            return .error(HTTPParseError(413, "body larger than \(limits.maxBodyBytes) bytes"))
        }
        state = .fixed(head, remaining: length)
        return mapEvent(next())
    }

    private func mapEvent(_ event: Event) -> HeadResult {
        switch event {
        case .needMore: return .needMore
        case .expectContinue: return .expectContinue
        case let .request(r): return .request(r)
        case let .error(e): return .error(e)
        }
    }

    private func checkExpect(_ head: Head) -> HTTPParseError? {
        guard let expect = head.headers["expect"] else { return nil }
        return expect.lowercased() == "100-continue" ? nil : HTTPParseError(417, "unsupported Expect value")
    }

    private mutating func findHeadEnd() -> Int? {
        var i = max(scanned, position)
        while i + 3 < buffer.count {
            if buffer[i] == 0x0d, buffer[i + 1] == 0x0a, buffer[i + 2] == 0x0d, buffer[i + 3] == 0x0a { return i }
            i += 1
        }
        scanned = max(position, buffer.count - 3)
        return nil
    }

    private mutating func resetScans() {
        scanned = position
        headChecked = position
        lineEndScanned = position
        lineEnd = nil
        requestLineChecked = false
    }

    /// The first LF of the pending head (the end of the request line), searched once over every byte.
    private mutating func requestLineEnd() -> Int? {
        if let lineEnd { return lineEnd }
        var i = max(lineEndScanned, position)
        while i < buffer.count {
            if buffer[i] == 0x0a {
                lineEnd = i
                return i
            }
            i += 1
        }
        lineEndScanned = i
        return nil
    }

    func firstLF(from start: Int) -> Int? {
        var i = start
        while i < buffer.count {
            if buffer[i] == 0x0a { return i }
            i += 1
        }
        return nil
    }

    /// Rejects NUL, bare CR and bare LF in the head.
    func checkHeadBytes(_ range: Range<Int>, complete: Bool) -> HTTPParseError? {
        var i = range.lowerBound
        while i < range.upperBound {
            let b = buffer[i]
            if b == 0 { return HTTPParseError(400, "NUL byte in the request head") }
            // The byte before the head belongs to the previous request's body: an LF at the head's start is bare.
            if b == 0x0a, i == position || buffer[i - 1] != 0x0d {
                return HTTPParseError(400, "bare LF in the request head")
            }
            if b == 0x0d {
                if i + 1 < buffer.count {
                    if buffer[i + 1] != 0x0a { return HTTPParseError(400, "bare CR in the request head") }
                } else if complete {
                    return HTTPParseError(400, "bare CR in the request head")
                }
            }
            i += 1
        }
        return nil
    }

}
