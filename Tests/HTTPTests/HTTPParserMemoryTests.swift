import Foundation
import Testing

@testable import HTTP

/// What a connection's parser holds is bounded by what it has not parsed yet, whatever the client's framing and
/// however its bytes are split into reads (docs/security.md, class 18).
@Suite("HTTP parser memory")
struct HTTPParserMemoryTests {
    /// One request on the wire: a fixed or chunked body, chunk extensions, trailers.
    static func request(_ rng: inout some RandomNumberGenerator) -> [UInt8] {
        Array(String(repeating: "\r\n", count: Int.random(in: 0...3, using: &rng) * 2000).utf8) + message(&rng)
    }

    static func message(_ rng: inout some RandomNumberGenerator) -> [UInt8] {
        let bodySize = Int.random(in: 0...40_000, using: &rng)
        guard Bool.random(using: &rng) else {
            return Array("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: \(bodySize)\r\n\r\n".utf8)
                + [UInt8](repeating: 0x61, count: bodySize)
        }
        var wire = Array("POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
        var left = bodySize
        while left > 0 {
            let size = min(left, Int.random(in: 1...4096, using: &rng))
            let extensionBytes = Bool.random(using: &rng) ? Int.random(in: 0...1000, using: &rng) : 0
            let ext = extensionBytes > 0 ? ";" + String(repeating: "x", count: extensionBytes) : ""
            wire += Array((String(size, radix: 16) + ext + "\r\n").utf8)
            wire += [UInt8](repeating: 0x62, count: size) + Array("\r\n".utf8)
            left -= size
        }
        wire += Array("0\r\n".utf8)
        if Bool.random(using: &rng) {
            wire += Array("X-Trailer: \(String(repeating: "t", count: Int.random(in: 0...20_000, using: &rng)))\r\n".utf8)
        }
        return wire + Array("\r\n".utf8)
    }

    /// Sweep: pipelined requests of random framing, with empty lines between them, cut into reads at random places.
    /// After every read the parser holds fewer than `consumedBytesKept` bytes it has parsed, every request comes out
    /// whole, and an idle parser keeps at most `capacityKept` of capacity after a large body.
    @Test func consumedBytesAreDroppedWhateverTheReads() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<40 {
            let requests = (0..<Int.random(in: 1...6, using: &rng)).map { _ in Self.request(&rng) }
            let wire = requests.flatMap { $0 }
            var parser = HTTPParser()
            var offset = 0
            var parsed = 0
            while offset < wire.count {
                let end = min(wire.count, offset + Int.random(in: 1...3000, using: &rng))
                parser.append(wire[offset..<end])
                offset = end
                #expect(parser.parsedBytesHeld < HTTPParser.consumedBytesKept, "held \(parser.parsedBytesHeld)")
                loop: while true {
                    switch parser.next() {
                    case .request: parsed += 1
                    case .needMore, .expectContinue: break loop
                    case let .error(e): Issue.record("\(e)"); return
                    }
                }
            }
            #expect(parsed == requests.count)
            parser.append(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
            #expect(parser.buffer.capacity <= HTTPParser.capacityKept, "\(parser.buffer.capacity)")
        }
    }

    /// A keep-alive connection that once sent a 1 MiB body does not hold a megabyte while it idles (ten thousand
    /// such connections held ten gigabytes): once its buffer empties, a large capacity is released.
    @Test func aLargeBodysCapacityIsNotKept() {
        var parser = HTTPParser()
        let size = 1024 * 1024
        parser.append(Array("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: \(size)\r\n\r\n".utf8))
        parser.append([UInt8](repeating: 0x61, count: size))
        guard case let .request(r) = parser.next() else {
            Issue.record("no request")
            return
        }
        #expect(r.body.count == size)
        parser.append(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(parser.buffer.capacity <= HTTPParser.capacityKept, "\(parser.buffer.capacity)")
    }

    /// The attack the sweep generalises: chunks of one byte, each with a kilobyte of extension, every read ending
    /// part-way through a size line (so the buffer never empties). The parser held every byte of it; now it holds a
    /// few kilobytes, and the extensions are refused (400) past 64 KiB in all. One-byte chunks without extensions, a
    /// body's worth of them, are a body like any other.
    @Test func chunkExtensionsNeitherPileUpNorRunOn() {
        var parser = HTTPParser()
        parser.append(Array("POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".utf8))
        #expect(parser.next() == .needMore)
        let chunk = Array(("1;" + String(repeating: "e", count: 1000) + "\r\nA\r\n").utf8)
        var status: Int?
        var maxHeld = 0
        for _ in 0..<2000 {
            parser.append(chunk[0..<10])
            _ = parser.next()
            parser.append(chunk[10...])
            if case let .error(e) = parser.next() {
                status = e.status
                break
            }
            maxHeld = max(maxHeld, parser.buffer.count)
        }
        #expect(status == 400)
        #expect(maxHeld < 8 * 1024, "\(maxHeld)")
        var plain = HTTPParser()
        let size = 300_000
        plain.append(Array("POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".utf8))
        plain.append(Array(String(repeating: "1\r\nA\r\n", count: size).utf8) + Array("0\r\n\r\n".utf8))
        guard case let .request(r) = plain.next() else {
            Issue.record("one-byte chunks refused")
            return
        }
        #expect(r.body.count == size)
    }

    /// Empty lines before a request line are skipped (RFC 9112 §2.2), and reads that each end on a CR kept them all.
    @Test func emptyLinesBeforeARequestDoNotPileUp() {
        var parser = HTTPParser()
        let lines = Array(String(repeating: "\r\n", count: 1000).utf8)
        parser.append([0x0d])
        for _ in 0..<1000 {
            parser.append([0x0a] + lines + [0x0d])
            #expect(parser.next() == .needMore)
            #expect(parser.buffer.count < 2 * HTTPParser.consumedBytesKept + lines.count)
        }
        parser.append(Array("\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        guard case let .request(r) = parser.next() else {
            Issue.record("no request")
            return
        }
        #expect(r.target == "/after")
    }

    /// A trailer line trickling in a byte at a time is searched once over: 30 KiB of it were searched from its
    /// start at every byte (450 million comparisons).
    @Test func aTricklingTrailerIsSearchedOnce() {
        var parser = HTTPParser()
        parser.append(Array("POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nA\r\n0\r\nX-T: ".utf8))
        #expect(parser.next() == .needMore)
        let started = ContinuousClock.now
        for _ in 0..<30_000 {
            parser.append([0x74])
            #expect(parser.next() == .needMore)
        }
        parser.append(Array("\r\n\r\n".utf8))
        guard case let .request(r) = parser.next() else {
            Issue.record("no request")
            return
        }
        #expect(r.body == [0x41])
        #expect(ContinuousClock.now - started < .seconds(2))
    }
}
