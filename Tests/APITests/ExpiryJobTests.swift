import Foundation
import Postgres
import Registry
import Testing
import TokenRegistryTesting

/// The inactivity expiry meets no installation it cannot finish every round (docs/security.md, class 28): one whose
/// row a tenant holds is in use and passed over at once; one whose deletion times out fails alone, the run goes on, and
/// the next rounds pass it over. Forced: a second session holds the rows.
@Suite("Inactivity expiry against held rows", .enabled(if: TestDatabase.isAvailable))
struct ExpiryJobTests {
    /// Idle for 400 days, the oldest first (`fids` in order).
    static func age(_ s: TestService, _ fids: [String]) async throws {
        for (n, fid) in fids.enumerated() {
            try await s.pool.query(
                "UPDATE installations SET last_seen_at = now() - make_interval(days => \(400 - n)) WHERE fid = \(fid)")
        }
    }

    static func exists(_ s: TestService, _ fid: String) async throws -> Bool {
        !(try await s.pool.query("SELECT 1 FROM installations WHERE fid = \(fid)").isEmpty)
    }

    /// The oldest idle installation's row is held by another transaction: the run passes it over without waiting and
    /// expires the others. (It waited for the lock until the statement time-out, then stopped the run, every round.)
    @Test func anInstallationWhoseRowIsHeldIsPassedOverNotWaitedFor() async throws {
        try await TestService.with(configure: { $0.databaseStatementTimeoutMillis = 3000 }) { s in
            let held = try await s.createInstallation()
            let idle = try await s.createInstallation()
            try await Self.age(s, [held.fid, idle.fid])
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query("SELECT 1 FROM installations WHERE fid = \(held.fid) FOR UPDATE")
            // Not waited for: a wait would end at the 3 s statement time-out, counted as a failure.
            let report = try await s.app.jobs.expiry.runReporting()
            #expect(report.processed == 1 && report.failed == 0, "\(report)")
            #expect(try await Self.exists(s, held.fid))
            #expect(try await !Self.exists(s, idle.fid))
            try await session.execute("COMMIT")
            // Passed over for the back-off on this replica; another replica (a job of its own) expires it.
            #expect(try await s.app.jobs.expiry.runReporting().processed == 0)
            let replica = try await s.replica()
            #expect(try await replica.jobs.expiry.runReporting().processed == 1)
            await replica.shutdown()
            #expect(try await !Self.exists(s, held.fid))
        }
    }

    /// The oldest idle installation's deletion times out (a row its deletion removes with it is held, as a deletion
    /// of millions of rows would outlast the time-out): that one fails, the run goes on to the next, and the next
    /// round passes it over at once instead of spending its time-out on it again.
    @Test func aDeletionThatTimesOutFailsAloneAndIsPassedOverAfter() async throws {
        try await TestService.with(configure: { $0.databaseStatementTimeoutMillis = 1000 }) { s in
            let poisoned = try await s.createInstallation()
            let first = try await s.createInstallation()
            let second = try await s.createInstallation()
            let bound = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(poisoned.fid)/user", headers: s.serverHeaders,
                json: ["userId": "dana"])
            #expect(bound.status == 200, "\(bound)")
            try await Self.age(s, [poisoned.fid, first.fid])
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query("SELECT 1 FROM user_bindings WHERE fid = \(poisoned.fid) FOR UPDATE")
            let report = try await s.app.jobs.expiry.runReporting()
            #expect(report.processed == 1 && report.failed == 1, "\(report)")
            #expect(try await Self.exists(s, poisoned.fid))
            #expect(try await !Self.exists(s, first.fid))
            // The next round: passed over (the row is still held, so a second try would time out and count as a
            // failure again), and the others still expire.
            try await Self.age(s, [second.fid])
            let next = try await s.app.jobs.expiry.runReporting()
            #expect(next.processed == 1 && next.failed == 0, "\(next)")
            #expect(try await !Self.exists(s, second.fid))
            try await session.execute("ROLLBACK")
        }
    }
}
