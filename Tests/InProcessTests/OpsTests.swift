import JSON
import Synchronization
import Testing
import TokenRegistryTesting

@testable import API

@Suite("Ops routes and errors")
struct OpsTests {
    /// `/healthz` and `/openapi.yaml` are answered on the event loop (immediate routes): the same answer, request id
    /// and metrics as any route, with a query string and for a HEAD too.
    @Test func immediateRoutesAnswerAsAnyRoute() async throws {
        try await InProcessService.with { s in
            for (method, path) in [("GET", "/healthz"), ("HEAD", "/healthz"), ("GET", "/healthz?probe=1")] {
                let reply = try await s.request(method, path, headers: ["X-Request-Id": "imm-\(method)"])
                #expect(reply.status == 200, "\(method) \(path)")
                #expect(reply.header("x-request-id") == "imm-\(method)")
                #expect(reply.text == (method == "HEAD" ? "" : #"{"status":"ok"}"#), "\(method) \(path)")
            }
            let spec = try await s.request("GET", "/openapi.yaml")
            #expect(spec.status == 200 && spec.text.hasPrefix("openapi:"))
            let metrics = try await s.request("GET", "/metrics").text
            #expect(metrics.contains(#"http_requests_total{method="GET",route="/healthz",status="200"} 2"#))
            #expect(metrics.contains(#"http_requests_total{method="HEAD",route="/healthz",status="200"} 1"#))
            #expect(metrics.contains(#"http_requests_total{method="GET",route="/openapi.yaml",status="200"} 1"#))
        }
    }

    @Test func unknownRoutesAndMethodsAnswerGoogleStyleJSON() async throws {
        try await InProcessService.with { s in
            let missing = try await s.request("GET", "/nope")
            #expect(missing.status == 404)
            #expect(missing.errorCode == 404)
            let wrongMethod = try await s.request("GET", "/v1/projects/\(s.project.id)/installations")
            #expect(wrongMethod.status == 405)
            #expect(wrongMethod.header("allow") == "POST")
            let badEscape = try await s.request("GET", "/v1/projects/%e2%82/installations")
            #expect(badEscape.status == 400)
        }
    }

    @Test func requestIDsAreEchoedOrMinted() async throws {
        try await InProcessService.with { s in
            #expect(
                try await s.request("GET", "/healthz", headers: ["X-Request-Id": "abc-123"]).header("x-request-id")
                    == "abc-123")
            let minted = try await s.request("GET", "/healthz", headers: ["X-Request-Id": "bad id with spaces"]).header(
                "x-request-id")
            #expect(minted != nil && minted != "bad id with spaces")
        }
    }

}

/// The database's gauges for `/metrics` are read once per interval, however many scrapes arrive at once.
@Suite("Gauge cache")
struct GaugeCacheTests {
    /// The interval is long here, so a slow machine (fifty tasks under the parallel suite took 8.9 s once) cannot
    /// end it between the burst and the later scrape.
    @Test func concurrentScrapesShareOneRound() async {
        let cache = GaugeCache(ttl: .seconds(600))
        let rounds = Atomic<Int>(0)
        let load: @Sendable () async -> [String] = {
            let round = rounds.add(1, ordering: .relaxed).newValue
            try? await Task.sleep(for: .milliseconds(200))
            return ["round \(round)"]
        }
        let answers = await withTaskGroup(of: [String].self) { group in
            for _ in 0..<50 { group.addTask { await cache.lines(load) } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(rounds.load(ordering: .relaxed) == 1)
        #expect(answers.count == 50 && answers.allSatisfy { $0 == ["round 1"] })
        // Within the interval, a later scrape is answered from the same round.
        #expect(await cache.lines(load) == ["round 1"])
        #expect(rounds.load(ordering: .relaxed) == 1)
    }

    /// Once the interval has passed since a round started, the next scrape starts a new one.
    @Test func aScrapeAfterTheIntervalStartsANewRound() async throws {
        let cache = GaugeCache(ttl: .milliseconds(100))
        let rounds = Atomic<Int>(0)
        let load: @Sendable () async -> [String] = { ["round \(rounds.add(1, ordering: .relaxed).newValue)"] }
        #expect(await cache.lines(load) == ["round 1"])
        try await Task.sleep(for: .milliseconds(150))
        #expect(await cache.lines(load) == ["round 2"])
    }
}
