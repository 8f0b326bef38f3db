import Crypto
import Foundation
import HTTP
import JSON
import Registry
import Testing
import TokenRegistryTesting

@testable import API

/// What an attacker or a careless operator could do, and no longer can (docs/security.md).
@Suite("Security")
struct SecurityTests {
    @Test func metricsAreBoundedAndCanBePrivate() async throws {
        try await InProcessService.with(configure: { $0.metricsToken = "metrics-secret-0123456789" }) { s in
            #expect(try await s.request("GET", "/metrics").status == 401)
            #expect(
                try await s.request("GET", "/metrics", headers: ["Authorization": "Bearer wrong-token"]).status == 401)
            // Methods outside the standard set are one label; they never become label values.
            for n in 0..<20 {
                _ = try await s.request("X\(n)" + String(repeating: "Y", count: 500), "/healthz")
            }
            let metrics = try await s.request(
                "GET", "/metrics", headers: ["Authorization": "Bearer metrics-secret-0123456789"])
            #expect(metrics.status == 200)
            #expect(metrics.text.contains("method=\"OTHER\""))
            #expect(!metrics.text.contains("YYYY"))
            #expect(metrics.text.contains("route=\"unmatched\"") || metrics.text.contains("/healthz"))
        }
    }

    @Test func oneAddressCannotStarveAnAppsInstalls() async throws {
        try await InProcessService.with(configure: {
            $0.createRatePerAddress = 1
            $0.createRatePerKey = 20
            $0.trustedProxyHops = 1
        }) { s in
            func create(from address: String) async throws -> Int {
                try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/installations",
                    headers: ["x-goog-api-key": s.web.apiKey, "X-Forwarded-For": "6.6.6.6, \(address)"],
                    json: ["fid": "", "authVersion": "FIS_v2", "appId": .string(s.web.id)]
                ).status
            }
            // One address floods: it is refused once its own bucket (burst 2, 1 a second) is empty...
            var refused = 0
            for _ in 0..<60 where try await create(from: "10.0.0.1") == 429 { refused += 1 }
            #expect(refused >= 30)
            // ...and the app's per-key bucket was charged only for what passed, so other devices still get in.
            for n in 2..<12 { #expect(try await create(from: "10.0.0.\(n)") == 200) }
        }
    }

    @Test func theClientAddressIsTheOneTheTrustedProxyWrote() {
        func address(_ forwarded: String?, hops: Int, socket: String = "127.0.0.1:5000") -> String {
            var request = HTTPRequest(method: "GET", target: "/")
            request.remoteAddress = socket
            if let forwarded { request.headers.add(name: "X-Forwarded-For", value: forwarded) }
            return ClientAddress.of(request, trustedProxyHops: hops)
        }
        #expect(address("1.2.3.4", hops: 0) == "127.0.0.1")
        #expect(address("forged, 1.2.3.4", hops: 1) == "1.2.3.4")
        #expect(address("forged, 1.2.3.4, 10.0.0.2", hops: 2) == "1.2.3.4")
        #expect(address(nil, hops: 1) == "127.0.0.1")
        #expect(address("1.2.3.4", hops: 2) == "127.0.0.1")
        // An IPv6 peer's address is all of it, not what precedes its first colon.
        #expect(address(nil, hops: 0, socket: "[2001:db8::7]:5000") == "2001:db8::7")
        #expect(address("forged", hops: 2, socket: "[::1]:5000") == "::1")
    }

    @Test func theRateLimitersMemoryIsBounded() {
        let limiter = RateLimiter(ratePerSecond: 1, burst: 2, capacity: 100)
        for n in 0..<10_000 { _ = limiter.acquire("address-\(n)", now: 1000) }
        #expect(limiter.keys <= 200)
        // A key keeps its state across one rotation.
        #expect(limiter.acquire("k", now: 2000) == nil)
        #expect(limiter.acquire("k", now: 2000) == nil)
        #expect(limiter.acquire("k", now: 2000) != nil)
        #expect(limiter.acquire("k", now: 2000.5) != nil)
    }
}
