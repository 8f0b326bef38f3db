import Foundation
import Glibc
import Synchronization
import Testing
import TokenRegistryTesting

@testable import HTTP

/// Answers whose body is produced after the head (``ResponseBody``): chunked, held back by a slow reader, stopped by a
/// client that leaves, cut by a producer that fails, delimited by the close on HTTP/1.0. In the timing group.
@Suite("HTTP server, streamed answers")
struct StreamedBodyTests {
    final class Probe: Sendable {
        let written = Atomic<Int>(0)
        let stopped = Atomic<Bool>(false)
        let ran = Atomic<Bool>(false)
    }

    static func piece(_ n: Int, size: Int) -> [UInt8] { [UInt8](repeating: UInt8(ascii: "a") + UInt8(n % 26), count: size) }

    /// A server streaming `pieces` pieces of `size` bytes at `/stream` (then failing, with `fail`), and a plain
    /// answer anywhere else.
    func withServer(
        pieces: Int, size: Int, fail: Bool = false, _ body: (HTTPServer, Int, Probe) async throws -> Void
    ) async throws {
        let probe = Probe()
        let server = HTTPServer(configuration: .init(host: "127.0.0.1", port: 0, eventLoops: 1)) { request in
            guard request.path == "/stream" else { return HTTPResponse(status: 200, contentType: "text/plain", body: "small") }
            var response = HTTPResponse(status: 200, headers: ["content-type": "text/plain"])
            response.stream = ResponseBody { writer in
                probe.ran.store(true, ordering: .relaxed)
                do {
                    for n in 0..<pieces {
                        try await writer.write(Self.piece(n, size: size))
                        probe.written.add(1, ordering: .relaxed)
                    }
                } catch {
                    probe.stopped.store(true, ordering: .relaxed)
                    throw error
                }
                if fail { throw CancellationError() }
            }
            return response
        }
        try await server.serving { port in try await body(server, port, probe) }
    }

    @Test func aStreamedAnswerIsChunkedAndTheConnectionServesTheNextRequestAfterIt() async throws {
        try await withServer(pieces: 500, size: 1000) { _, port, _ in
            let client = try RawHTTPClient(port: port, timeout: 10)
            try await client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\nGET /small HTTP/1.1\r\nHost: x\r\n\r\n")
            let streamed = try #require(try await client.readResponse())
            #expect(streamed.status == 200 && streamed.header("transfer-encoding") == "chunked")
            #expect(streamed.header("content-length") == nil)
            #expect(streamed.body == (0..<500).flatMap { Self.piece($0, size: 1000) })
            let next = try #require(try await client.readResponse())
            #expect(next.status == 200 && next.text == "small")
        }
    }

    /// The producer waits while the connection's unsent output is at its bound: a client that reads nothing holds it
    /// to the bound and what the kernel's buffers take, not the 64 MiB it would write.
    @Test func aSlowReaderHoldsTheProducerBack() async throws {
        let size = 64 * 1024
        try await withServer(pieces: 1024, size: size) { server, port, probe in
            let client = try RawHTTPClient(port: port, timeout: 20)
            try await client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            var last = -1
            for _ in 0..<30 where probe.written.load(ordering: .relaxed) != last {
                last = probe.written.load(ordering: .relaxed)
                try await Task.sleep(for: .milliseconds(100))
            }
            let held = probe.written.load(ordering: .relaxed)
            #expect(held < 1024, "the producer ran to its end with nobody reading")
            #expect(held * size < 24 * 1024 * 1024, "\(held) pieces were written unread")
            #expect(server.pendingOutputBytes <= HTTPServer.Configuration().maxPendingOutputBytes + size + 64)
            let response = try #require(try await client.readResponse())
            #expect(response.body.count == 1024 * size)
            #expect(probe.written.load(ordering: .relaxed) == 1024)
        }
    }

    @Test func aClientThatLeavesStopsTheProducer() async throws {
        try await withServer(pieces: 1_000_000, size: 16 * 1024) { _, port, probe in
            do {
                let client = try RawHTTPClient(port: port, timeout: 10)
                try await client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
                try await Task.sleep(for: .milliseconds(200))
            }
            for _ in 0..<100 where !probe.stopped.load(ordering: .relaxed) { try await Task.sleep(for: .milliseconds(50)) }
            let stopped = probe.stopped.load(ordering: .relaxed)
            #expect(stopped, "the producer kept writing to a closed connection")
        }
    }

    @Test func aProducerThatFailsCutsTheBody() async throws {
        try await withServer(pieces: 3, size: 100, fail: true) { _, port, _ in
            let client = try RawHTTPClient(port: port, timeout: 10)
            try await client.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            // No last chunk: the body never reads as complete.
            #expect(try await client.readResponse() == nil)
        }
    }

    @Test func http10IsDelimitedByTheCloseAndHeadRunsNoProducer() async throws {
        try await withServer(pieces: 10, size: 100) { _, port, probe in
            let old = try RawHTTPClient(port: port, timeout: 10)
            try await old.send("GET /stream HTTP/1.0\r\n\r\n")
            let response = try #require(try await old.readResponse())
            #expect(response.header("transfer-encoding") == nil && response.header("connection") == "close")
            #expect(response.body == (0..<10).flatMap { Self.piece($0, size: 100) })
            probe.ran.store(false, ordering: .relaxed)
            let head = try RawHTTPClient(port: port, timeout: 10)
            try await head.send("HEAD /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            let answer = try #require(try await head.readResponse(headRequest: true))
            #expect(answer.status == 200 && answer.body.isEmpty)
            try await Task.sleep(for: .milliseconds(100))
            let ran = probe.ran.load(ordering: .relaxed)
            #expect(!ran)
        }
    }
}
