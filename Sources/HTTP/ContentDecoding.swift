import CZlib

/// Request body content codings: `gzip` is inflated with a size limit, `identity` passes through.
enum ContentDecoding {
    /// Decodes `body` per its `Content-Encoding` and removes that header once the body is decoded.
    ///
    /// - Throws: ``HTTPParseError`` 415 for an unsupported coding, 400 for corrupt gzip data and 413 when the
    ///   inflated body would pass `limit` (so a small compressed bomb never allocates more than `limit`).
    static func decode(body: [UInt8], headers: inout HTTPHeaders, limit: Int) throws(HTTPParseError) -> [UInt8] {
        let codings = headers.values("content-encoding")
            .flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: " \t").lowercased() }
            .filter { $0 != "identity" && !$0.isEmpty }
        guard !codings.isEmpty else { return body }
        guard codings.count == 1, codings[0] == "gzip" || codings[0] == "x-gzip" else {
            throw HTTPParseError(415, "unsupported Content-Encoding; only gzip is accepted")
        }
        // An empty body with a content coding is an empty body (Android sends `Content-Encoding: gzip` on its
        // body-less DELETE).
        guard !body.isEmpty else {
            headers.replaceOrAdd(name: "content-encoding", value: "identity")
            return body
        }
        let inflated = try gunzip(body, limit: inflationLimit(compressed: body.count, limit: limit))
        headers.replaceOrAdd(name: "content-encoding", value: "identity")
        return inflated
    }

    /// How many times its compressed size a request body may inflate to (JSON compresses 3-10 times).
    static let maxInflation = 64
    /// What a request body of `compressed` bytes may inflate to: 64 times its size, at least 64 KiB, at most `limit`.
    /// Inflating runs on the event loop before any route, principal or rate limit: a kilobyte of gzipped zeros was
    /// a megabyte inflated and copied for a 404 (about 1,000 times what it cost the client, an attacker's review).
    static func inflationLimit(compressed: Int, limit: Int) -> Int {
        min(limit, max(64 * 1024, compressed.multipliedReportingOverflow(by: maxInflation).partialValue))
    }

    static func gunzip(_ input: [UInt8], limit: Int) throws(HTTPParseError) -> [UInt8] {
        guard !input.isEmpty else { throw HTTPParseError(400, "empty gzip body") }
        var stream = z_stream()
        guard shim_inflateInit2(&stream, 16 + MAX_WBITS) == Z_OK else { throw HTTPParseError(400, "gzip init failed") }
        defer { inflateEnd(&stream) }
        var output = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var source = input
        var status: Int32 = Z_OK
        source.withUnsafeMutableBufferPointer { src in
            stream.next_in = src.baseAddress
            stream.avail_in = UInt32(src.count)
            repeat {
                chunk.withUnsafeMutableBufferPointer { dst in
                    stream.next_out = dst.baseAddress
                    stream.avail_out = UInt32(dst.count)
                    status = inflate(&stream, Z_NO_FLUSH)
                }
                let produced = chunk.count - Int(stream.avail_out)
                if output.count + produced > limit {
                    status = Z_MEM_ERROR
                    return
                }
                output.append(contentsOf: chunk[0..<produced])
            } while status == Z_OK && (stream.avail_in > 0 || stream.avail_out == 0)
        }
        switch status {
        case Z_STREAM_END:
            guard stream.avail_in == 0 else { throw HTTPParseError(400, "data after the gzip stream") }
            return output
        case Z_MEM_ERROR: throw HTTPParseError(413, "decompressed body larger than \(limit) bytes")
        case Z_OK, Z_BUF_ERROR: throw HTTPParseError(400, "truncated gzip body")
        default: throw HTTPParseError(400, "corrupt gzip body")
        }
    }

    /// Compresses `input` as gzip; used by tests and clients of this module.
    static func gzip(_ input: [UInt8]) -> [UInt8] {
        var stream = z_stream()
        guard shim_deflateInit2(&stream, Z_DEFAULT_COMPRESSION, 16 + MAX_WBITS) == Z_OK else { return [] }
        defer { deflateEnd(&stream) }
        var output = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var source = input
        source.withUnsafeMutableBufferPointer { src in
            stream.next_in = src.baseAddress
            stream.avail_in = UInt32(src.count)
            var status: Int32 = Z_OK
            repeat {
                chunk.withUnsafeMutableBufferPointer { dst in
                    stream.next_out = dst.baseAddress
                    stream.avail_out = UInt32(dst.count)
                    status = deflate(&stream, Z_FINISH)
                }
                output.append(contentsOf: chunk[0..<(chunk.count - Int(stream.avail_out))])
            } while status == Z_OK
        }
        return output
    }
}

/// Gzip helpers for callers outside the module (tests, clients).
public enum Gzip {
    public static func compress(_ bytes: [UInt8]) -> [UInt8] { ContentDecoding.gzip(bytes) }

    public static func decompress(_ bytes: [UInt8], limit: Int) throws -> [UInt8] {
        try ContentDecoding.gunzip(bytes, limit: limit)
    }
}
