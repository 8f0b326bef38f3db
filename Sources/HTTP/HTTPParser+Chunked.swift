/// The chunked transfer coding (RFC 9112 §7.1), incrementally: size line, data, CRLF, trailers.
extension HTTPParser {
    enum ChunkStep { case progress, needMore, error(HTTPParseError), done }

    mutating func stepChunked(_ head: Head, _ phase: ChunkPhase) -> ChunkStep {
        switch phase {
        case .size:
            guard let lf = pendingLineEnd() else {
                return buffer.count - position > 1024
                    ? .error(HTTPParseError(400, "chunk size line too long")) : .needMore
            }
            guard lf > position, buffer[lf - 1] == 0x0d else {
                return .error(HTTPParseError(400, "bare LF in chunked body"))
            }
            let line = buffer[position..<(lf - 1)]
            guard line.count <= 1024 else { return .error(HTTPParseError(400, "chunk size line too long")) }
            var size = 0
            var digits = 0
            var index = line.startIndex
            while index < line.endIndex, let d = HTTPParser.hexValue(line[index]) {
                // Eight hex digits already exceed any body limit; more could only overflow.
                if digits == 8 { return .error(HTTPParseError(400, "invalid chunk size")) }
                size = size * 16 + Int(d)
                digits += 1
                index += 1
            }
            guard digits > 0 else { return .error(HTTPParseError(400, "invalid chunk size")) }
            var rest = line[index...]
            // Extensions carry nothing a route reads: a body's are bounded in total, so its framing cannot be a gigabyte
            // of wire under a small body (one-byte chunks without them are at most 12 bytes of wire a byte of data).
            chunkExtensionBytes += rest.count
            guard chunkExtensionBytes <= HTTPParser.maxChunkExtensionBytes else {
                return .error(
                    HTTPParseError(400, "chunk extensions longer than \(HTTPParser.maxChunkExtensionBytes) bytes in all"))
            }
            while let f = rest.first, f == 0x20 || f == 0x09 { rest = rest.dropFirst() }
            if let f = rest.first {
                guard f == UInt8(ascii: ";"), rest.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7f) }) else {
                    return .error(HTTPParseError(400, "invalid chunk size"))
                }
            }
            position = lf + 1
            if size == 0 {
                state = .chunked(head, .trailers(0))
            } else {
                guard body.count + size <= limits.maxBodyBytes else {
                    return .error(HTTPParseError(413, "body larger than \(limits.maxBodyBytes) bytes"))
                }
                state = .chunked(head, .data(size))
            }
            return .progress
        case let .data(remaining):
            let take = min(remaining, buffer.count - position)
            guard take > 0 else { return .needMore }
            body.append(contentsOf: buffer[position..<position + take])
            position += take
            state = .chunked(head, take == remaining ? .dataEnd : .data(remaining - take))
            return .progress
        case .dataEnd:
            guard buffer.count - position >= 2 else { return .needMore }
            guard buffer[position] == 0x0d, buffer[position + 1] == 0x0a else {
                return .error(HTTPParseError(400, "chunk data not followed by CRLF"))
            }
            position += 2
            state = .chunked(head, .size)
            return .progress
        case let .trailers(seen):
            guard let lf = pendingLineEnd() else {
                return seen + buffer.count - position > limits.maxHeaderBytes
                    ? .error(HTTPParseError(431, "trailer section too large")) : .needMore
            }
            guard lf > position, buffer[lf - 1] == 0x0d else {
                return .error(HTTPParseError(400, "bare LF in trailers"))
            }
            let line = buffer[position..<(lf - 1)]
            let total = seen + line.count + 2
            guard total <= limits.maxHeaderBytes else {
                return .error(HTTPParseError(431, "trailer section too large"))
            }
            if let e = checkHeadBytes(position..<(lf + 1), complete: true) { return .error(e) }
            position = lf + 1
            if line.isEmpty { return .done }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex,
                line[line.startIndex..<colon].allSatisfy(HTTPParser.isTokenChar)
            else { return .error(HTTPParseError(400, "malformed trailer field")) }
            state = .chunked(head, .trailers(total))
            return .progress
        }
    }

    /// The LF ending the line at `position`, searching only bytes not searched before (``pendingLineScanned``).
    private mutating func pendingLineEnd() -> Int? {
        if let lf = firstLF(from: position + pendingLineScanned) {
            pendingLineScanned = 0
            return lf
        }
        pendingLineScanned = buffer.count - position
        return nil
    }

    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
