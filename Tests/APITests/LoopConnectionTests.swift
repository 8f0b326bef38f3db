import HTTP
import Postgres
import Synchronization
import Testing
import TokenRegistryTesting

/// Database connections placed on an HTTP event loop, when that loop stops (at shutdown) while they still work.
@Suite("Connections on a stopped loop", .enabled(if: TestDatabase.isAvailable))
struct LoopConnectionTests {
    /// Forced interleaving: one connection of the loop holds a table lock in an open transaction; another waits on
    /// that lock; then the loop stops. The holder's COMMIT must still go out while the waiter waits: a wait that
    /// blocked the stopped loop's job queue would hold the COMMIT behind it, and neither would ever finish.
    @Test func aStoppedLoopsConnectionsDoNotWaitOnEachOther() async throws {
        try await TestDatabase.with { url in
            let server = HTTPServer(configuration: .init(host: "127.0.0.1", port: 0, eventLoops: 1)) { _ in
                HTTPResponse(status: 200)
            }
            try server.start()
            let loop = try #require(server.eventLoops.first)
            let holder = try await PostgresConnection.connect(url, on: loop)
            let waiter = try await PostgresConnection.connect(url, on: loop)
            let monitor = try await SecondSession(conninfo: url)
            try await holder.execute("CREATE TABLE t (v int)")
            await holder.begin()
            try await holder.query("LOCK TABLE t IN EXCLUSIVE MODE")
            let insert = Task { try await waiter.query("INSERT INTO t VALUES (1)") }
            try await monitor.waitUntilBlocked(1)
            await server.shutdown(drainTimeout: 1)
            // Bounded, and never awaiting the work itself: without the fix the COMMIT never goes out, and the test
            // must fail, not hang.
            let done = Mutex(false)
            Task {
                guard (try? await holder.commit()) != nil, (try? await insert.value) != nil else { return }
                done.withLock { $0 = true }
            }
            let deadline = ContinuousClock.now + .seconds(10)
            while !done.withLock({ $0 }), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            let finished = done.withLock { $0 }
            #expect(finished, "the insert never got its answer after the loop stopped")
            let count = try await monitor.query("SELECT count(*) AS n FROM t").first?.require("n", as: Int.self)
            #expect(count == 1)
        }
    }
}
