import JSON
import Synchronization
import Testing
import TokenRegistryTesting

@testable import API

@Suite("Ops routes and errors, on the wire", .enabled(if: TestDatabase.isAvailable))
struct OpsTestsLive {
    @Test func healthReadinessMetrics() async throws {
        try await TestService.with { s in
            #expect(try await s.request("GET", "/healthz").status == 200)
            #expect(try await s.request("HEAD", "/healthz").status == 200)
            #expect(try await s.request("GET", "/readyz").json?["status"]?.stringValue == "ready")
            _ = try await s.createInstallation()
            let metrics = try await s.request("GET", "/metrics")
            #expect(metrics.status == 200)
            #expect(
                metrics.text.contains(
                    "http_requests_total{method=\"POST\",route=\"/v1/projects/{project}/installations\",status=\"200\"} 1"
                ))
            #expect(
                metrics.text.contains(
                    "http_request_duration_seconds_bucket{route=\"/v1/projects/{project}/installations\",le=\"+Inf\"} 1"
                ))
            #expect(metrics.text.contains("http_open_connections"))
            #expect(metrics.text.contains("db_pool_connections{state=\"idle\"}"))
            // The installation was written by group commit: one transaction, one write.
            #expect(metrics.text.contains("db_group_commit_transactions_total 1\n"))
            #expect(metrics.text.contains("db_group_commit_writes_total 1\n"))
            #expect(metrics.text.contains("db_group_commit_retried_alone_total 0\n"))
        }
    }

    /// Handlers' statements run on connections placed on the HTTP event loops (no thread per connection, no hop
    /// per query); connections the service opened before its loops started are replaced as they come back.
    @Test func requestsRunOnConnectionsOfTheEventLoops() async throws {
        try await TestService.with { s in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<16 { group.addTask { _ = try await s.createInstallation() } }
                try await group.waitForAll()
            }
            let statistics = s.pool.statistics
            #expect(statistics.inUse == 0)
            #expect(statistics.idle > 0)
            #expect(statistics.idleOnLoops == statistics.idle)
        }
    }

    @Test func readinessFalseWhileDraining() async throws {
        try await TestService.with { s in
            let client = try RawHTTPClient(port: s.port)
            try await client.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            _ = try await client.readResponse()
            let drain = Task { await s.app.shutdown() }
            try await Task.sleep(for: .milliseconds(50))
            #expect(s.app.isDraining)
            await drain.value
        }
    }
}
