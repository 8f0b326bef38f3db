import Foundation
import Glibc
import Synchronization
import Testing
import TokenRegistryTesting

@testable import HTTP

/// A connection's unsent answers are bounded (backpressure), and a client that reads a byte at a time is closed by
/// the write timeout. Both run in the timing group (scripts/test.sh), one at a time.
@Suite("HTTP server, output bounds")
struct OutputBoundTests {
    static let answerBytes = 256 * 1024

    final class Counter: Sendable { let value = Atomic<Int>(0) }

    /// A server whose every answer is `answerBytes` long, counting the requests it answered.
    func withServer(
        _ configure: (inout HTTPServer.Configuration) -> Void = { _ in },
        _ body: (HTTPServer, Int, Counter) async throws -> Void
    ) async throws {
        var configuration = HTTPServer.Configuration(host: "127.0.0.1", port: 0, eventLoops: 1)
        configure(&configuration)
        let answered = Counter()
        let payload = [UInt8](repeating: UInt8(ascii: "x"), count: OutputBoundTests.answerBytes)
        let server = HTTPServer(configuration: configuration) { _ in
            answered.value.add(1, ordering: .relaxed)
            return HTTPResponse(status: 200, headers: ["content-type": "text/plain"], body: payload)
        }
        try await server.serving { port in try await body(server, port, answered) }
    }

    /// Requests whose answers (50 MiB) are far more than the kernel's socket buffers on loopback hold (a few MiB
    /// each side), so unread answers pile up at the server.
    static let requests = 200

    /// Without backpressure the loop dispatched pipelined requests until 1 MiB of answers waited (and read on until
    /// 4 MiB of requests did): every connection could hold that much. Now it stops at the bound and one answer.
    @Test func unreadAnswersAreBoundedPerConnection() async throws {
        try await withServer { server, port, answered in
            let client = try RawHTTPClient(port: port, timeout: 10)
            let requests = String(repeating: "GET /big HTTP/1.1\r\nHost: x\r\n\r\n", count: OutputBoundTests.requests)
            try await client.send(requests)
            // Let the loop do all it will: answered stops growing once the connection is held back.
            var last = -1
            for _ in 0..<50 where answered.value.load(ordering: .relaxed) != last {
                last = answered.value.load(ordering: .relaxed)
                try await Task.sleep(for: .milliseconds(100))
            }
            let bound = HTTPServer.Configuration().maxPendingOutputBytes + OutputBoundTests.answerBytes + 1024
            #expect(server.pendingOutputBytes > 0, "the client read nothing, so something waits")
            #expect(server.pendingOutputBytes <= bound, "\(server.pendingOutputBytes) bytes wait (bound \(bound))")
            #expect(answered.value.load(ordering: .relaxed) < OutputBoundTests.requests)
            // Reading resumes the connection: every request is answered, in order, once the client reads.
            for _ in 0..<OutputBoundTests.requests {
                let response = try #require(try await client.readResponse())
                #expect(response.status == 200 && response.body.count == OutputBoundTests.answerBytes)
            }
            #expect(answered.value.load(ordering: .relaxed) == OutputBoundTests.requests)
            #expect(server.pendingOutputBytes == 0)
        }
    }

    /// Requests pipelined behind one whose answer the client does not read wait in the kernel's buffers, not the
    /// process's: reading stopped only at 4 MiB of them, so every such connection held 4 MiB (and its answers) for as
    /// long as it read a little in each write period.
    @Test func pipelinedRequestsBehindAnUnreadAnswerWaitInTheKernel() async throws {
        try await withServer { server, port, answered in
            let client = try RawHTTPClient(port: port, timeout: 10)
            let request = "GET /big HTTP/1.1\r\nHost: x\r\nX-Pad: \(String(repeating: "p", count: 970))\r\n\r\n"
            let count = 1024  // 1 MiB of requests: the kernel's loopback buffers hold it, so the send completes
            try await client.send(String(repeating: request, count: count))
            var last = -1
            for _ in 0..<50 where answered.value.load(ordering: .relaxed) != last {
                last = answered.value.load(ordering: .relaxed)
                try await Task.sleep(for: .milliseconds(100))
            }
            let bound = 2 * 64 * 1024  // the allowance and one read
            #expect(server.heldInputBytes <= bound, "\(server.heldInputBytes) bytes of requests held")
            for _ in 0..<count {
                let response = try #require(try await client.readResponse())
                #expect(response.status == 200)
            }
            #expect(answered.value.load(ordering: .relaxed) == count)
        }
    }

    /// Slow uploads of large bodies, together, stop at the process's input budget: a request that will hold more
    /// than the allowance reads past it only with its share of the budget, and waits, reading nothing, until there is
    /// room. Small requests never wait; when an upload ends (or goes away), the next one takes its share and goes on.
    @Test func largeBodiesTogetherStopAtTheProcesssInputBudget() async throws {
        let budget = 256 * 1024
        try await withServer({ $0.maxBufferedInputTotal = budget }) { server, port, _ in
            let partial = 200 * 1024
            let head = "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: \(partial + 1)\r\n\r\n"
            var uploads: [RawHTTPClient] = []
            for _ in 0..<4 {
                let client = try RawHTTPClient(port: port, timeout: 10)
                try await client.send(Array(head.utf8) + [UInt8](repeating: UInt8(ascii: "b"), count: partial))
                uploads.append(client)
                try await Task.sleep(for: .milliseconds(100))
            }
            // One share fits the budget; the other three wait at the allowance (and one read past it), reading nothing.
            #expect(server.reservedInputBytes > partial && server.reservedInputBytes <= budget)
            let held = server.heldInputBytes
            #expect(held < 4 * partial - 64 * 1024, "\(held) bytes held: the waiting uploads were read")
            let small = try RawHTTPClient(port: port, timeout: 10)
            try await small.send("GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try await small.readResponse()?.status == 200)
            // Every upload sends its last byte: the first ends, and each of the others in turn (in no set order) takes
            // its share, reads the rest of its body and is answered.
            for client in uploads { try await client.send([UInt8(ascii: "b")]) }
            for client in uploads { #expect(try await client.readResponse()?.status == 200) }
            #expect(server.reservedInputBytes == 0)
            // One that goes away mid-body gives its share back.
            let gone = try RawHTTPClient(port: port, timeout: 10)
            try await gone.send(Array(head.utf8) + [UInt8](repeating: UInt8(ascii: "b"), count: partial))
            try await Task.sleep(for: .milliseconds(200))
            #expect(server.reservedInputBytes > 0)
            uploads = []
            _ = consume gone
            try await Task.sleep(for: .milliseconds(300))
            #expect(server.reservedInputBytes == 0)
        }
    }

    /// A byte read now and then used to count as activity, so such a client held its connection (and its unsent
    /// answer) for as long as it liked. Now each write period must send its minimum.
    @Test func aClientReadingAByteAtATimeIsClosedByTheWriteTimeout() async throws {
        try await withServer({
            $0.writeTimeoutMillis = 1000
            $0.idleTimeoutMillis = 60_000
        }) { server, port, _ in
            let client = try RawHTTPClient(port: port, timeout: 10)
            try await client.send(String(repeating: "GET /big HTTP/1.1\r\nHost: x\r\n\r\n", count: OutputBoundTests.requests))
            let started = ContinuousClock.now
            // The client goes on reading a byte every 100 ms; the server must drop the connection meanwhile.
            let closed = try await offPool { () -> Bool in
                var byte: UInt8 = 0
                while ContinuousClock.now - started < .seconds(15) {
                    if server.writeTimeouts > 0 && server.openConnections == 0 { return true }
                    let n = recv(client.fd, &byte, 1, 0)
                    if n == 0 || (n < 0 && errno == ECONNRESET) { return true }
                    usleep(100_000)
                }
                return false
            }
            #expect(closed, "a client reading 10 bytes a second kept its connection for 15 s")
            #expect(ContinuousClock.now - started < .seconds(15))
            #expect(server.writeTimeouts == 1)
            #expect(server.pendingOutputBytes == 0)
        }
    }

    /// The process's CPU time (user and system), in seconds.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
            + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000_000
    }

    /// A client that half-closes while reading is paused (its answers pile up unread): the loop used to be woken at
    /// once by the half-close, again and again, since it asked for it without reading (a spin of a whole core).
    @Test func aHalfCloseWhileReadingIsPausedDoesNotSpinTheLoop() async throws {
        try await withServer({ $0.writeTimeoutMillis = 5000 }) { server, port, answered in
            let client = try RawHTTPClient(port: port, timeout: 10)
            try await client.send(String(repeating: "GET /big HTTP/1.1\r\nHost: x\r\n\r\n", count: OutputBoundTests.requests))
            var last = -1
            for _ in 0..<50 where answered.value.load(ordering: .relaxed) != last {
                last = answered.value.load(ordering: .relaxed)
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(server.pendingOutputBytes > 0)
            client.shutdownWrite()
            try await Task.sleep(for: .milliseconds(200))
            let before = OutputBoundTests.cpuSeconds()
            try await Task.sleep(for: .seconds(1))
            let spent = OutputBoundTests.cpuSeconds() - before
            #expect(spent < 0.4, "the process spent \(spent) s of CPU in a second while nothing happened")
        }
    }
}
