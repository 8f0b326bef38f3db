/// The request head, read in place: the request line and the header fields are slices of the parser's buffer, and
/// only the strings a request keeps are made.
extension HTTPParser {
    /// The end of the line that starts at `start` in the head `range`: its CR, or the head's end for the last line.
    /// (`checkHeadBytes` made sure every CR in the head starts a CRLF.)
    func endOfLine(from start: Int, in range: Range<Int>) -> Int {
        var i = start
        while i < range.upperBound, buffer[i] != 0x0d { i += 1 }
        return i
    }

    /// A request line's three parts: method, target and version.
    struct RequestLine {
        var method: ArraySlice<UInt8>
        var target: ArraySlice<UInt8>
        var version: HTTPVersion
    }

    /// Checks and splits the request line in `range` (without its CRLF).
    func parseRequestLine(_ range: Range<Int>) -> Result<RequestLine, HTTPParseError> {
        let requestLine = buffer[range]
        if requestLine.count > limits.maxRequestLineBytes {
            return .failure(HTTPParseError(414, "request line longer than \(limits.maxRequestLineBytes) bytes"))
        }
        // Exactly three parts, separated by single spaces.
        guard let firstSpace = requestLine.firstIndex(of: 0x20),
            let secondSpace = requestLine[(firstSpace + 1)...].firstIndex(of: 0x20),
            !requestLine[(secondSpace + 1)...].contains(0x20)
        else { return .failure(HTTPParseError(400, "malformed request line")) }
        let method = requestLine[..<firstSpace]
        guard !method.isEmpty, method.allSatisfy(HTTPParser.isTokenChar) else {
            return .failure(HTTPParseError(400, "malformed request line"))
        }
        let target = requestLine[(firstSpace + 1)..<secondSpace]
        guard !target.isEmpty, target.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
            return .failure(HTTPParseError(400, "malformed request target"))
        }
        guard target.first == UInt8(ascii: "/") || (target.count == 1 && target.first == UInt8(ascii: "*")) else {
            return .failure(HTTPParseError(400, "request target must be in origin form"))
        }
        let versionBytes = requestLine[(secondSpace + 1)...]
        if versionBytes.elementsEqual("HTTP/1.1".utf8) {
            return .success(RequestLine(method: method, target: target, version: .http1_1))
        } else if versionBytes.elementsEqual("HTTP/1.0".utf8) {
            return .success(RequestLine(method: method, target: target, version: .http1_0))
        } else if versionBytes.count == 8, versionBytes.starts(with: "HTTP/".utf8) {
            return .failure(HTTPParseError(505, "HTTP version not supported"))
        }
        return .failure(HTTPParseError(400, "malformed HTTP version"))
    }

    /// Parses a complete head in place: lines, parts and fields are read as slices of the buffer, and only the
    /// strings the request keeps are made (no array of lines or of request-line parts, names lower-cased once).
    func buildHead(_ range: Range<Int>) -> Result<Head, HTTPParseError> {
        let requestLineEnd = endOfLine(from: range.lowerBound, in: range)
        let requestLine: RequestLine
        switch parseRequestLine(range.lowerBound..<requestLineEnd) {
        case let .success(line): requestLine = line
        case let .failure(error): return .failure(error)
        }
        let version = requestLine.version
        // Each header line starts after the CRLF that ends the line before it.
        var headerCount = 0
        var lineStart = requestLineEnd + 2
        while lineStart <= range.upperBound {
            headerCount += 1
            lineStart = endOfLine(from: lineStart, in: range) + 2
        }
        if headerCount > limits.maxHeaderCount {
            return .failure(HTTPParseError(431, "more than \(limits.maxHeaderCount) header fields"))
        }
        var headers = HTTPHeaders(capacity: headerCount)
        var headerBytes = 0
        var hosts = 0
        lineStart = requestLineEnd + 2
        while lineStart <= range.upperBound {
            let end = endOfLine(from: lineStart, in: range)
            let line = buffer[lineStart..<end]
            lineStart = end + 2
            headerBytes += line.count + 2
            guard let first = line.first else { continue }
            if first == 0x20 || first == 0x09 { return .failure(HTTPParseError(400, "obsolete line folding")) }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else {
                return .failure(HTTPParseError(400, "header field without a colon"))
            }
            let name = line[line.startIndex..<colon]
            guard !name.isEmpty else { return .failure(HTTPParseError(400, "empty header name")) }
            if let last = name.last, last == 0x20 || last == 0x09 {
                return .failure(HTTPParseError(400, "whitespace before a header colon"))
            }
            guard name.allSatisfy(HTTPParser.isTokenChar) else {
                return .failure(HTTPParseError(400, "invalid character in a header name"))
            }
            var value = line[(colon + 1)...]
            while let f = value.first, f == 0x20 || f == 0x09 { value = value.dropFirst() }
            while let l = value.last, l == 0x20 || l == 0x09 { value = value.dropLast() }
            guard value.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7f) }) else {
                return .failure(HTTPParseError(400, "invalid character in a header value"))
            }
            let key = HTTPHeaders.lowercasedKey(name)
            if key == "host" { hosts += 1 }
            headers.add(key: key, value: String(decoding: value, as: UTF8.self))
        }
        if headerBytes > limits.maxHeaderBytes {
            return .failure(HTTPParseError(431, "header section larger than \(limits.maxHeaderBytes) bytes"))
        }
        if version == .http1_1 {
            guard hosts == 1 else { return .failure(HTTPParseError(400, "exactly one Host header is required")) }
        } else if hosts > 1 {
            return .failure(HTTPParseError(400, "repeated Host header"))
        }
        return .success(
            Head(
                method: String(decoding: requestLine.method, as: UTF8.self),
                target: String(decoding: requestLine.target, as: UTF8.self), version: version, headers: headers))
    }

    static func isTokenChar(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(c)
        }
    }
}
