import Foundation
import Testing
import TokenRegistryTesting

@testable import HTTP

/// Live tests: a real server on port 0, driven over real sockets.
@Suite("HTTP server, live")
struct HTTPServerLiveTests {
    static let echo: HTTPHandler = { request in
        if request.path == "/slow" { try? await Task.sleep(for: .milliseconds(1500)) }
        if request.path.hasPrefix("/jitter") { try? await Task.sleep(for: .milliseconds(Int.random(in: 0...20))) }
        let body =
            "\(request.method) \(request.target) \(request.body.count) \(String(decoding: request.body, as: UTF8.self))"
        return HTTPResponse(status: 200, contentType: "text/plain", body: body)
    }

    func withServer(
        _ configure: (inout HTTPServer.Configuration) -> Void = { _ in },
        _ body: (HTTPServer, Int) async throws -> Void
    ) async throws {
        var configuration = HTTPServer.Configuration(host: "127.0.0.1", port: 0, eventLoops: 2)
        configure(&configuration)
        let server = HTTPServer(configuration: configuration, handler: HTTPServerLiveTests.echo)
        try await server.serving { port in try await body(server, port) }
    }

    @Test func keepAliveServesManyRequestsOnOneConnection() async throws {
        try await withServer { _, port in
            let client = try RawHTTPClient(port: port)
            for i in 0..<5 {
                try await client.send("GET /k\(i) HTTP/1.1\r\nHost: x\r\n\r\n")
                let response = try #require(try await client.readResponse())
                #expect(response.status == 200)
                #expect(response.text.hasPrefix("GET /k\(i) "))
            }
        }
    }

    @Test func tenPipelinedRequestsAreAnsweredInOrder() async throws {
        try await withServer { _, port in
            let client = try RawHTTPClient(port: port)
            let batch = (0..<10).map { "GET /jitter/\($0) HTTP/1.1\r\nHost: x\r\n\r\n" }.joined()
            try await client.send(batch)
            for i in 0..<10 {
                let response = try #require(try await client.readResponse())
                #expect(response.text.hasPrefix("GET /jitter/\(i) "))
            }
        }
    }

    @Test func chunkedAndGzipBodies() async throws {
        try await withServer { _, port in
            let chunked = try #require(
                try await RawHTTPClient.exchange(
                    port: port,
                    "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            )
            #expect(chunked.text == "POST /c 5 abcde")
            let zipped = Gzip.compress(Array("{\"a\":1}".utf8))
            let client = try RawHTTPClient(port: port)
            try await client.send(
                Array(
                    "POST /g HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: \(zipped.count)\r\n\r\n"
                        .utf8) + zipped)
            let response = try #require(try await client.readResponse())
            #expect(response.text == "POST /g 7 {\"a\":1}")
        }
    }

    @Test func expectContinueGetsInterimResponse() async throws {
        try await withServer { _, port in
            let client = try RawHTTPClient(port: port)
            try await client.send("POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
            // The client reads the 100 before it sends the body; readResponse skips interim responses,
            // so read raw bytes here.
            let interim = try await offPool { () -> String in
                var buffer = [UInt8](repeating: 0, count: 64)
                let n = recv(client.fd, &buffer, 64, 0)
                return String(decoding: buffer[0..<max(0, n)], as: UTF8.self)
            }
            #expect(interim.hasPrefix("HTTP/1.1 100 Continue"))
            try await client.send("body")
            let response = try #require(try await client.readResponse())
            #expect(response.text == "POST /e 4 body")
        }
    }

    @Test(arguments: HTTPParserTests.smuggling)
    func smugglingShapesGet400AndClose(_ shape: (String, String)) async throws {
        try await withServer { _, port in
            let client = try RawHTTPClient(port: port)
            try await client.send(shape.1)
            let response = try #require(try await client.readResponse(), "\(shape.0)")
            #expect(response.status == 400, "\(shape.0)")
            #expect(response.header("connection") == "close")
            #expect(await client.isClosedByServer(), "\(shape.0)")
        }
    }

    @Test func limitsAnswerWithTheirOwnStatus() async throws {
        try await withServer({
            $0.limits.maxBodyBytes = 1000; $0.limits.maxHeaderCount = 10
        }) { _, port in
            let long = try #require(
                try await RawHTTPClient.exchange(
                    port: port, "GET /\(String(repeating: "a", count: 9000)) HTTP/1.1\r\nHost: x\r\n\r\n"))
            #expect(long.status == 414)
            let headers = (0..<11).map { "X-\($0): 1\r\n" }.joined()
            let many = try #require(
                try await RawHTTPClient.exchange(port: port, "GET / HTTP/1.1\r\nHost: x\r\n\(headers)\r\n"))
            #expect(many.status == 431)
            let big = try #require(
                try await RawHTTPClient.exchange(
                    port: port, "GET / HTTP/1.1\r\nHost: x\r\nX: \(String(repeating: "b", count: 40000))\r\n\r\n"))
            #expect(big.status == 431)
            let client = try RawHTTPClient(port: port)
            try await client.send(
                "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + String(repeating: "z", count: 5000))
            let tooLarge = try #require(try await client.readResponse())
            #expect(tooLarge.status == 413)
            #expect(tooLarge.text.contains("\"code\":413"))
        }
    }

    @Test func slowClientGets408AndIsClosed() async throws {
        try await withServer({ $0.requestTimeoutMillis = 400 }) { _, port in
            let client = try RawHTTPClient(port: port)
            try await client.send("GET / HTTP/1.1\r\nHost: x\r\n")
            let response = try #require(try await client.readResponse())
            #expect(response.status == 408)
            #expect(await client.isClosedByServer())
        }
    }

    /// `HOST` may be IPv6: `::` takes IPv6 and IPv4 clients (an IPv4 client reads as `a.b.c.d`, not as
    /// `::ffff:a.b.c.d`, so per-address limits count it once), and `[::1]` is read as `::1`.
    @Test func ipv6ListenersServeBothFamilies() async throws {
        let whoami: HTTPHandler = { request in
            HTTPResponse(status: 200, contentType: "text/plain", body: "\(request.remoteHost) \(request.remoteAddress)")
        }
        for host in ["::", "[::1]"] {
            let configuration = HTTPServer.Configuration(host: host, port: 0, eventLoops: 1)
            try await HTTPServer(configuration: configuration, handler: whoami).serving { port in
                let request = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
                let v6 = try #require(try await RawHTTPClient.exchange(port: port, host: "::1", request))
                #expect(v6.text.hasPrefix("::1 [::1]:"), "\(host): \(v6.text)")
                if host == "::" {
                    let v4 = try #require(try await RawHTTPClient.exchange(port: port, host: "127.0.0.1", request))
                    #expect(v4.text.hasPrefix("127.0.0.1 127.0.0.1:"), "\(v4.text)")
                }
            }
        }
        for host in ["0.0.0.0", "127.0.0.1", "::", "::1", "[::1]", "localhost", "fe80::1"] {
            #expect(HTTPServer.canListen(on: host), "\(host)")
        }
        for host in ["", "999.1.1.1", "1.2.3", "example.com", "::g", "[::1", "::1]", "0.0.0.0:80"] {
            #expect(!HTTPServer.canListen(on: host), "\(host)")
        }
    }

    /// A TLS handshake sent to the plain port, or an HTTP/0.9 request line, is answered 400 and closed at once, long
    /// before the request time-out (a client that guessed the scheme wrong learns it without waiting).
    @Test func aRequestLineThatCannotBeValidIsAnsweredAtOnce() async throws {
        try await withServer({ $0.requestTimeoutMillis = 5_000 }) { _, port in
            for opening in [[0x16, 0x03, 0x01, 0x02, 0x00, 0x01], Array("GET /\r\n".utf8)] as [[UInt8]] {
                let client = try RawHTTPClient(port: port, timeout: 2)
                let started = ContinuousClock.now
                try await client.send(opening)
                let response = try #require(try await client.readResponse())
                #expect(response.status == 400)
                #expect(ContinuousClock.now - started < .seconds(1))
                #expect(await client.isClosedByServer())
            }
        }
    }

    /// Empty lines before a request line are allowed, but they start the request timer and never count as
    /// activity: a client trickling CRLFs is answered 408 and closed once the request timeout passes.
    @Test func aTrickleOfEmptyLinesDoesNotHoldTheConnection() async throws {
        try await withServer({
            $0.requestTimeoutMillis = 600
            $0.idleTimeoutMillis = 60_000
        }) { _, port in
            let client = try RawHTTPClient(port: port)
            client.setTimeout(5)
            let started = ContinuousClock.now
            var closed = false
            // The server answers 408 and closes within the request timeout (plus a sweep); well before 6 s.
            while !closed && ContinuousClock.now - started < .seconds(6) {
                do { try await client.send("\r\n") } catch { closed = true }
                try await Task.sleep(for: .milliseconds(100))
            }
            let response = try? await client.readResponse()
            #expect(closed || response?.status == 408 || response == nil)
            #expect(ContinuousClock.now - started < .seconds(6))
            #expect(await client.isClosedByServer())
        }
    }

    /// Idle time counts from the last complete response, not from the last byte read.
    @Test func idleTimeCountsFromTheLastResponse() async throws {
        try await withServer({
            $0.requestTimeoutMillis = 60_000
            $0.idleTimeoutMillis = 1500
        }) { _, port in
            let client = try RawHTTPClient(port: port)
            client.setTimeout(10)
            try await client.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try await client.readResponse()?.status == 200)
            // A slow request (its head trickling for longer than the idle timeout) is bound by the request timeout,
            // not the idle one...
            try await client.send("GET /b HTTP/1.1\r\n")
            try await Task.sleep(for: .milliseconds(2500))
            try await client.send("Host: x\r\n\r\n")
            #expect(try await client.readResponse()?.status == 200)
            // ...and after a response, silence closes it.
            try await Task.sleep(for: .milliseconds(2500))
            #expect(await client.isClosedByServer())
        }
    }

    @Test func oneAddressHoldsAtMostItsShareOfConnections() async throws {
        try await withServer({ $0.maxConnectionsPerAddress = 3 }) { server, port in
            var held = try (0..<3).map { _ in try RawHTTPClient(port: port) }
            for client in held {
                try await client.send("GET /h HTTP/1.1\r\nHost: x\r\n\r\n")
                #expect(try await client.readResponse()?.status == 200)
            }
            let refused = try await RawHTTPClient.exchange(port: port, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(refused?.status == 503)
            #expect(server.refusedConnections >= 1)
            held.removeAll()  // each client closes its socket as it goes
            // The slots come back as the server sees the closes (at once, or a little later on a loaded machine).
            var status: Int?
            for _ in 0..<40 where status != 200 {
                try await Task.sleep(for: .milliseconds(50))
                status = try await RawHTTPClient.exchange(port: port, "GET /y HTTP/1.1\r\nHost: x\r\n\r\n")?.status
            }
            #expect(status == 200)
        }
    }

    /// A client that resets its connection while its handler runs keeps its place in the connection counts until the
    /// handler answers: its address's one connection is still taken (a new one is refused), and given back after.
    /// (The slot came back at the reset, and one address could start any number of handlers.)
    @Test func aConnectionResetMidRequestHoldsItsSlotUntilItsHandlerEnds() async throws {
        try await withServer({ $0.maxConnectionsPerAddress = 1 }) { server, port in
            var client: RawHTTPClient? = try RawHTTPClient(port: port)
            try await client?.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            try await Task.sleep(for: .milliseconds(200))
            client?.resetOnClose()
            client = nil
            try await Task.sleep(for: .milliseconds(200))
            let meanwhile = try await RawHTTPClient.exchange(port: port, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(meanwhile?.status == 503, "\(String(describing: meanwhile))")
            var status: Int?
            for _ in 0..<60 where status != 200 {
                try await Task.sleep(for: .milliseconds(100))
                status = try await RawHTTPClient.exchange(port: port, "GET /y HTTP/1.1\r\nHost: x\r\n\r\n")?.status
            }
            #expect(status == 200)
        }
    }

    @Test func idleKeepAliveConnectionIsClosed() async throws {
        try await withServer({ $0.idleTimeoutMillis = 300 }) { server, port in
            let client = try RawHTTPClient(port: port)
            try await client.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            _ = try await client.readResponse()
            #expect(await client.isClosedByServer())
        }
    }

    @Test func thousandConcurrentConnectionsAreAllAnswered() async throws {
        try await withServer { _, port in
            let clients = try (0..<1000).map { _ in try RawHTTPClient(port: port) }
            for (i, client) in clients.enumerated() { try await client.send("GET /n\(i) HTTP/1.1\r\nHost: x\r\n\r\n") }
            var answered = 0
            for (i, client) in clients.enumerated() {
                if let r = try await client.readResponse(), r.status == 200, r.text.hasPrefix("GET /n\(i) ") {
                    answered += 1
                }
            }
            #expect(answered == 1000)
        }
    }

    @Test func connectionsBeyondTheMaximumAreRefusedNotCrashed() async throws {
        try await withServer({
            $0.maxConnections = 4; $0.eventLoops = 1
        }) { server, port in
            let held = try (0..<4).map { _ in try RawHTTPClient(port: port) }
            for client in held {
                try await client.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"); _ = try await client.readResponse()
            }
            let extra = try #require(try await RawHTTPClient.exchange(port: port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
            #expect(extra.status == 503)
            #expect(server.refusedConnections >= 1)
            _ = held
        }
    }

    @Test func shutdownFinishesInFlightRequestsAndStopsAccepting() async throws {
        let server = HTTPServer(
            configuration: .init(host: "127.0.0.1", port: 0, eventLoops: 2), handler: HTTPServerLiveTests.echo)
        let port = try server.start()
        let client = try RawHTTPClient(port: port)
        try await client.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        try await Task.sleep(for: .milliseconds(100))
        let stopped = Task { await server.shutdown(drainTimeout: 5) }
        // Wait until the listeners are closed: the drain has begun while the slow request is still running.
        var refused = false
        for _ in 0..<100 where !refused {
            refused = (try? RawHTTPClient(port: port)) == nil
            if !refused { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(refused)
        let response = try #require(try await client.readResponse())
        #expect(response.status == 200)
        #expect(response.header("connection") == "close")
        await stopped.value
        #expect(throws: (any Error).self) { _ = try RawHTTPClient(port: port) }
    }

    @Test func headRequestsGetNoBody() async throws {
        try await withServer { _, port in
            let client = try RawHTTPClient(port: port)
            try await client.send("HEAD /h HTTP/1.1\r\nHost: x\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n")
            let head = try #require(try await client.readResponse(headRequest: true))
            #expect(head.status == 200)
            let next = try #require(try await client.readResponse())
            #expect(next.text.hasPrefix("GET /after"))
        }
    }
}
