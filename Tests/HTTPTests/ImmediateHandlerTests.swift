import Synchronization
import Testing
import TokenRegistryTesting

@testable import HTTP

/// Requests the immediate handler answers on the event loop, beside those that go to the async handler.
@Suite("HTTP server, immediate answers")
struct ImmediateHandlerTests {
    /// Immediate answers for `/now/…`, on a loop thread; everything else to the async handler, which counts.
    final class Probe: Sendable {
        let asyncCalls = Atomic<Int>(0)
        let offLoop = Atomic<Int>(0)
        let loops = Mutex<[EventLoop]>([])
    }

    func withServer(_ body: (Int, Probe) async throws -> Void) async throws {
        let probe = Probe()
        let server = HTTPServer(
            configuration: .init(host: "127.0.0.1", port: 0, eventLoops: 2),
            immediate: { request in
                guard request.path.hasPrefix("/now/") else { return nil }
                if !probe.loops.withLock({ $0.contains { $0.isCurrent } }) { probe.offLoop.add(1, ordering: .relaxed) }
                return HTTPResponse(status: 200, contentType: "text/plain", body: "now \(request.target)")
            }
        ) { request in
            probe.asyncCalls.add(1, ordering: .relaxed)
            try? await Task.sleep(for: .milliseconds(Int.random(in: 0...15)))
            return HTTPResponse(status: 200, contentType: "text/plain", body: "later \(request.target)")
        }
        try await server.serving { port in
            probe.loops.withLock { $0 = server.eventLoops }
            try await body(port, probe)
        }
    }

    /// Pipelined requests, immediate and not in turn, are answered in the order sent; the async handler sees only
    /// its own.
    @Test func pipelinedRequestsOfBothKindsAreAnsweredInOrder() async throws {
        try await withServer { port, probe in
            let client = try RawHTTPClient(port: port)
            let paths = (0..<20).map { $0 % 2 == 0 ? "/now/\($0)" : "/later/\($0)" }
            try await client.send(paths.map { "GET \($0) HTTP/1.1\r\nHost: x\r\n\r\n" }.joined())
            for path in paths {
                let response = try #require(try await client.readResponse())
                #expect(response.status == 200)
                #expect(response.text == (path.hasPrefix("/now/") ? "now \(path)" : "later \(path)"))
            }
            #expect(probe.asyncCalls.load(ordering: .relaxed) == 10)
            #expect(probe.offLoop.load(ordering: .relaxed) == 0, "immediate answers run on the event loop")
        }
    }

    /// A HEAD answered immediately has its headers and no body, and the connection goes on.
    @Test func aHeadAnsweredImmediatelyHasNoBody() async throws {
        try await withServer { port, _ in
            let client = try RawHTTPClient(port: port)
            try await client.send("HEAD /now/h HTTP/1.1\r\nHost: x\r\n\r\nGET /now/g HTTP/1.1\r\nHost: x\r\n\r\n")
            let head = try #require(try await client.readResponse(headRequest: true))
            #expect(head.status == 200 && head.header("content-length") == "\("now /now/h".utf8.count)")
            let get = try #require(try await client.readResponse())
            #expect(get.text == "now /now/g")
        }
    }
}
