import Foundation
import Postgres
import Registry
import RegistryPostgres
import Testing
import TokenRegistryTesting

/// The deletion gauges of /metrics: completed deletions are counted as they complete and as the purge drops them
/// (on PostgreSQL by migration 15's triggers, not by counting the table every round).
@Suite("Deletion counts")
struct DeletionCountTests {
    @Test(arguments: StoreKind.available)
    func theDoneCountFollowsCompletionsAndThePurge(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            /// Pending, done and overdue, as /metrics shows them (a state with none is 0).
            func counts() async throws -> [Int] {
                let gauges = try await f.services.jobs.gauges().deletions
                return [ReceiptState.pending, .done, .overdue].map { gauges[$0] ?? 0 }
            }
            // No linked service: each deletion is done at once.
            for _ in 0..<3 {
                let i = try await f.installation()
                #expect(try await f.delete(i, reason: .server))
            }
            #expect(try await counts() == [0, 3, 0])
            // A purge before the audit period drops nothing, and folds the counted completions into the count.
            #expect(try await f.services.jobs.purge.run() == 0)
            #expect(try await counts() == [0, 3, 0])
            // With a linked service, a deletion is pending until the service confirms it.
            try await f.link("crm")
            let last = try await f.installation()
            #expect(try await f.delete(last, reason: .client))
            #expect(try await counts() == [1, 3, 0])
            f.transport.answer("https://crm.example/hook", .status(200))
            #expect(try await f.services.jobs.deliverDue() == 1)
            #expect(try await counts() == [0, 4, 0])
            // After the audit period the purge drops the four records, and the count with them.
            f.clock.advance(by: DeletionPolicy().auditPeriod + 1)
            #expect(try await f.services.jobs.purge.run() == 4)
            #expect(try await counts() == [0, 0, 0])
        }
    }

    /// A backlog of deletion records is purged a batch a transaction, and at most `perRun` a run: what a run costs is
    /// what it removes, never the table. Each record's feed events go with it, whichever batch it is in.
    @Test(arguments: StoreKind.available)
    func aBacklogIsPurgedInBatches(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            var fids: [String] = []
            for _ in 0..<5 {
                let i = try await f.installation()
                fids.append(i.fid)
                #expect(try await f.delete(i, reason: .server))
            }
            try await f.services.jobs.relay {
                try await f.services.feed.events(projectID: f.project.id, after: 0, limit: 100).count >= 10
            }
            f.clock.advance(by: DeletionPolicy().auditPeriod + 1)
            var job = f.services.jobs.purge
            job.batch = 2
            job.perRun = 3
            #expect(try await job.run() == 3)
            #expect(try await job.run() == 2)
            #expect(try await job.run() == 0)
            let left = try await f.services.feed.events(projectID: f.project.id, after: 0, limit: 100)
            #expect(left.filter { fids.contains($0.fid) }.isEmpty)
        }
    }

    /// A database that had completed deletions before migration 15 starts its count from them.
    @Test(.enabled(if: TestDatabase.isAvailable))
    func theMigrationCountsTheDeletionsAlreadyDone() async throws {
        let conninfo = try await TestDatabase.create()
        do {
            try await countFromTheMigration(conninfo)
        } catch {
            await TestDatabase.drop(conninfo)
            throw error
        }
        await TestDatabase.drop(conninfo)
    }

    private func countFromTheMigration(_ conninfo: String) async throws {
        let before = Schema.migrations.filter { $0.version < 15 }
        try await Migrator(migrations: before).migrate(conninfo: conninfo)
        let connection = try await PostgresConnection.connect(conninfo)
        try await connection.query(
            """
            INSERT INTO deletions (project_id, fid, fid_hmac, reason, requested_at, deadline, completed_at)
            SELECT 'p', 'f' || n, '\\x00', 'client', now(), now() + interval '180 days',
                   CASE WHEN n <= 5 THEN now() END
            FROM generate_series(1, 7) AS n
            """)
        #expect(try await Schema.migrator.migrate(conninfo: conninfo).contains(15))
        let done = try await connection.query("SELECT sum(done)::bigint AS done FROM deletion_counts").first
        #expect(try done?.require("done", as: Int.self) == 5)
        // And from then on the triggers count: two more complete, one of them is purged.
        try await connection.query("UPDATE deletions SET completed_at = now() WHERE completed_at IS NULL")
        try await connection.query("DELETE FROM deletions WHERE fid = 'f1'")
        let counted = try await connection.query(
            """
            SELECT ((SELECT sum(done) FROM deletion_counts) + (SELECT sum(done) FROM deletion_count_changes))::bigint
                AS done
            """
        ).first
        #expect(try counted?.require("done", as: Int.self) == 6)
    }
}

/// The audit chainer takes at most a share of one project a call, for fairness; a run still chains every pending
/// entry of a busy project, not one share of it.
@Suite("Audit chain runs")
struct AuditChainRunTests {
    @Test(arguments: StoreKind.available)
    func aRunChainsMoreThanOneShareOfAProject(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let audit = f.services.audit
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in 0..<1200 {
                    group.addTask {
                        try await audit.record(
                            projectID: f.project.id, action: "test.write", target: .resource("things/\(n)"),
                            actor: "cli:test", requestID: "r\(n)", outcome: "OK")
                    }
                }
                try await group.waitForAll()
            }
            let heads = try await audit.chain()
            #expect(heads.map(\.chained) == [1200])
            #expect(try await audit.state(projectID: f.project.id)?.pending == 0)
            #expect(try await audit.verify(projectID: f.project.id).intact)
        }
    }

    /// Four projects that each keep more than a share pending fill a chainer's call; a quiet project whose entry has
    /// waited longer is still chained in the first call (in project_id order, the busy "aa-" ones took every call).
    @Test(arguments: StoreKind.available)
    func busyProjectsDoNotHoldBackAQuietOnesEntries(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let audit = f.services.audit
            func record(_ project: String, _ n: Int) async throws {
                try await audit.record(
                    projectID: project, action: "test.write", target: .resource("things/\(n)"), actor: "cli:test",
                    requestID: "r\(n)", outcome: "OK")
            }
            try await record("zz-quiet", 0)
            for busy in 1...4 {
                for n in 0..<600 { try await record("aa-busy-\(busy)", n) }
            }
            let heads = try await audit.chain(limit: AuditService.chainBatch)
            #expect(heads.contains { $0.projectID == "zz-quiet" && $0.chained == 1 }, "\(heads.map(\.projectID))")
            #expect(heads.reduce(0) { $0 + $1.chained } <= AuditService.chainBatch)
        }
    }
}
