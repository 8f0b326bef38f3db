import Foundation
import Testing
import TokenRegistryTesting

@testable import Postgres

/// Pipeline mode and group commit against a live PostgreSQL.
@Suite("Pipelines and group commit", .enabled(if: TestDatabase.isAvailable))
struct PipelineTests {
    func withDatabase(_ body: (String) async throws -> Void) async throws { try await TestDatabase.with(body) }

    /// A pipeline outside a transaction is one implicit transaction: a failure rolls back what ran before it, skips
    /// what follows, and leaves the connection idle and usable.
    @Test func aFailingStatementRollsBackItsPipeline() async throws {
        try await withDatabase { url in
            let connection = try await PostgresConnection.connect(url)
            try await connection.execute("CREATE TABLE p (v int)")
            let outcomes = try await connection.pipeline([
                "INSERT INTO p VALUES (1)", "SELECT 1 / \(0) AS x", "INSERT INTO p VALUES (2)",
            ])
            #expect(outcomes.count == 3)
            if case .failure = outcomes[0] { Issue.record("the first statement ran, then rolled back") }
            #expect(outcomes[1].error?.sqlState == "22012")
            #expect(outcomes[2].error?.sqlState == PostgresConnection.notRun.sqlState)
            #expect(!connection.isInTransaction && connection.isHealthy)
            let count = try await connection.query("SELECT count(*) AS n FROM p").first?.require("n", as: Int.self)
            #expect(count == 0)
            let all = try await connection.pipeline(["INSERT INTO p VALUES (3)", "INSERT INTO p VALUES (4)"])
            #expect(all.allSatisfy { $0.error == nil })
            #expect(try await connection.query("SELECT count(*) AS n FROM p").first?.require("n", as: Int.self) == 2)
        }
    }

    /// Sent separately, each statement is a transaction of its own: one that fails, or holds a NUL, fails alone, and
    /// those before and after it commit; a statement that does not parse fails alone too, and is not cached.
    @Test func statementsSentSeparatelyFailAlone() async throws {
        try await withDatabase { url in
            let connection = try await PostgresConnection.connect(url)
            try await connection.execute("CREATE TABLE p (v int)")
            let outcomes = try await connection.pipelineSeparately([
                "INSERT INTO p VALUES (1)", "SELECT 1 / \(0) AS x", "INSERT INTO p VALUES (2)",
                "SELECT \("a\u{0}b") AS t", "SELEC broken", "INSERT INTO p VALUES (3)", "SELEC broken",
            ])
            #expect(outcomes.count == 7)
            #expect(outcomes[1].error?.sqlState == "22012")
            #expect(outcomes[3].error?.code == PostgresError.nulInParameter.code)
            // The second copy of the broken statement runs by the name its first Parse never made: it answers that
            // Parse's error, not "prepared statement does not exist".
            #expect(outcomes[4].error?.sqlState == "42601")
            #expect(outcomes[6].error?.sqlState == "42601")
            for i in [0, 2, 5] { #expect(outcomes[i].error == nil, "statement \(i)") }
            #expect(!connection.isInTransaction && connection.isHealthy)
            let stored = try await connection.query("SELECT array_agg(v ORDER BY v)::text AS vs FROM p").first?
                .require("vs", as: String.self)
            #expect(stored == "{1,2,3}")
        }
    }

    /// A statement whose `Parse` fails answers the parse error, is not remembered as prepared, and a corrected
    /// retry in the same session works.
    @Test func aStatementThatDoesNotPrepareIsNotCached() async throws {
        try await withDatabase { url in
            let connection = try await PostgresConnection.connect(url)
            for _ in 0..<2 {
                let outcomes = try await connection.pipeline(["SELECT * FROM later", "SELECT 1 AS one"])
                #expect(outcomes[0].error?.sqlState == "42P01")
                #expect(outcomes[1].error != nil)
            }
            try await connection.execute("CREATE TABLE later (v int); INSERT INTO later VALUES (7)")
            let rows = try await connection.query("SELECT * FROM later")
            #expect(try rows.first?.require("v", as: Int.self) == 7)
        }
    }

    /// Statements sent unprepared (SQL a client shapes) run in their place in the pipeline, bind their values, fail
    /// alone as others do, and leave nothing in the connection's statement cache however many shapes arrive.
    @Test func unpreparedStatementsRunInOrderAndAreNotCached() async throws {
        try await withDatabase { url in
            let connection = try await PostgresConnection.connect(url)
            _ = try await connection.query("SELECT \(1) AS warm")
            let cached = await connection.prepared.count
            for n in 0..<50 {
                var shaped = PostgresQuery(unsafeSQL: "SELECT $1::int + \(n) AS v", binds: ["1"])
                shaped.isPrepared = false
                let outcomes = try await connection.pipeline(["SELECT \(n) AS before", shaped, "SELECT 2 AS after"])
                #expect(try outcomes[0].get().first?.require("before", as: Int.self) == n)
                #expect(try outcomes[1].get().first?.require("v", as: Int.self) == n + 1)
                #expect(try outcomes[2].get().first?.require("after", as: Int.self) == 2)
            }
            #expect(await connection.prepared.count == cached + 2)
            var failing = PostgresQuery(unsafeSQL: "SELECT 1 / $1::int AS x", binds: ["0"])
            failing.isPrepared = false
            let outcomes = try await connection.pipeline([failing, "SELECT 3 AS three"])
            #expect(outcomes[0].error?.sqlState == "22012")
            #expect(outcomes[1].error?.sqlState == PostgresConnection.notRun.sqlState)
            #expect(connection.isHealthy && !connection.isInTransaction)
        }
    }

    /// Inside `BEGIN` a pipeline runs in the transaction: nothing is committed until `COMMIT`.
    @Test func aPipelineInsideATransactionCommitsWithIt() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url, maxConnections: 2))
            try await pool.query("CREATE TABLE p (v int)")
            try await pool.withTransaction { c in
                _ = try await c.pipeline(["INSERT INTO p VALUES (1)", "INSERT INTO p VALUES (2)"])
                #expect(c.isInTransaction)
                let outside = try await pool.query("SELECT count(*) AS n FROM p").first?.require("n", as: Int.self)
                #expect(outside == 0)
            }
            #expect(try await pool.query("SELECT count(*) AS n FROM p").first?.require("n", as: Int.self) == 2)
        }
    }

    /// Forced interleaving: another session locks the table, so the first writes block in the database and the
    /// rest queue in the pool. Released, the queued writes commit together (fewer transactions than writes), each
    /// answered only once stored; with a bad write among them, it fails alone and every other write is stored.
    @Test func queuedWritesCommitTogetherAndABadOneFailsAlone() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(PostgresPool.Configuration(conninfo: url, maxConnections: 4).waitingOnLocks())
            try await pool.query("CREATE TABLE g (k text PRIMARY KEY CHECK (k <> 'bad'), xid bigint)")
            let second = try await SecondSession(conninfo: url)
            for round in ["a", "b"] {
                let keys = (0..<20).map { "\(round)\($0)" } + (round == "b" ? ["bad"] : [])
                try await second.execute("BEGIN; LOCK TABLE g IN EXCLUSIVE MODE")
                let writes = Task {
                    await withTaskGroup(of: (String, PostgresError?).self) { group in
                        for key in keys {
                            group.addTask {
                                do {
                                    try await pool.groupCommitted(
                                        "INSERT INTO g VALUES (\(key), txid_current())", key: key)
                                    return (key, nil)
                                } catch {
                                    return (key, error as? PostgresError)
                                }
                            }
                        }
                        var outcomes: [String: PostgresError?] = [:]
                        for await (key, error) in group { outcomes[key] = error }
                        return outcomes
                    }
                }
                // Two transactions (the lane's limit) wait on the lock; every other write queues behind them.
                try await second.waitUntilBlocked(2)
                let deadline = ContinuousClock.now + .seconds(10)
                while pool.statistics.queuedWrites < keys.count - 2, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(5))
                }
                #expect(pool.statistics.queuedWrites == keys.count - 2)
                try await second.execute("COMMIT")
                let outcomes = await writes.value
                for key in keys where key != "bad" { #expect(outcomes[key]! == nil, "write \(key) failed") }
                if round == "b" { #expect(outcomes["bad"]!?.sqlState == "23514") }
                let stored = try await pool.query(
                    "SELECT count(*) AS n, count(DISTINCT xid) AS transactions FROM g WHERE k LIKE \(round + "%")"
                ).first
                #expect(try stored?.require("n", as: Int.self) == 20)
                let transactions = try #require(try stored?.require("transactions", as: Int.self))
                // Round a: the two that waited on the lock, then the 18 queued in one transaction. Round b: the bad
                // write rolled its batch back, and those writes committed one by one.
                if round == "a" { #expect(transactions == 3) } else { #expect(transactions >= 3) }
            }
        }
    }

    /// A write queued for a batch while the running batches wait on a lock fails when the acquire time-out passes,
    /// as a wait for a connection does, and never runs afterwards; the batches that were running commit.
    @Test func aQueuedWriteWaitsNoLongerThanTheAcquireTimeout() async throws {
        try await withDatabase { url in
            var configuration = PostgresPool.Configuration(
                conninfo: url, maxConnections: 4, acquireTimeout: .milliseconds(300))
            // Batches wait on the lock as long as it is held (a lock they wait for is what ``aWriteBlockedByALock…``
            // takes out of them).
            configuration.groupCommitLockWait = nil
            let pool = PostgresPool(configuration)
            try await pool.query("CREATE TABLE g (k text PRIMARY KEY)")
            let second = try await SecondSession(conninfo: url)
            try await second.execute("BEGIN; LOCK TABLE g IN EXCLUSIVE MODE")
            let keys = (0..<6).map { "k\($0)" }
            let writes = Task {
                await withTaskGroup(of: (String, PostgresError?, Duration).self) { group in
                    for key in keys {
                        group.addTask {
                            let started = ContinuousClock.now
                            do {
                                try await pool.groupCommitted("INSERT INTO g VALUES (\(key))", key: key)
                                return (key, nil, ContinuousClock.now - started)
                            } catch {
                                return (key, error as? PostgresError, ContinuousClock.now - started)
                            }
                        }
                    }
                    var outcomes: [String: (PostgresError?, Duration)] = [:]
                    for await (key, error, took) in group { outcomes[key] = (error, took) }
                    return outcomes
                }
            }
            try await second.waitUntilBlocked(2)
            // The four queued writes time out while the lock is still held (for two seconds).
            try await Task.sleep(for: .seconds(2))
            #expect(pool.statistics.queuedWrites == 0)
            try await second.execute("COMMIT")
            let outcomes = await writes.value
            let failed = outcomes.filter { $0.value.0 != nil }
            #expect(failed.count == 4)
            for (key, (error, took)) in failed {
                #expect(error?.code == .poolTimeout, "\(key): \(String(describing: error))")
                #expect(took < .seconds(1.5), "\(key) failed after \(took)")
            }
            let stored = try await pool.query("SELECT k FROM g ORDER BY k").map { try $0.require("k", as: String.self) }
            #expect(Set(stored) == Set(outcomes.filter { $0.value.0 == nil }.keys))
            #expect(stored.count == 2)
        }
    }

    /// Writes blocked on a row lock another session holds (a tenant's long transaction) leave their batches after the
    /// lock wait and run alone: writes of other rows, queued behind them in the same lane, commit while the lock is
    /// still held, and the blocked ones commit once it goes. At most a quarter of the pool's connections wait this
    /// way (3 of 12); the writes beyond them fail at once, as an acquire that timed out does. (Without the bound the
    /// lane's two batches waited on the lock, and every write queued behind them failed at the acquire time-out.)
    @Test func aWriteBlockedByALockLeavesItsBatchAndTheLaneGoesOn() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url, maxConnections: 12, acquireTimeout: .seconds(3)))
            try await pool.query("CREATE TABLE g (k text PRIMARY KEY, n int NOT NULL DEFAULT 0)")
            try await pool.query("INSERT INTO g VALUES ('held')")
            let second = try await SecondSession(conninfo: url)
            try await second.execute("BEGIN; UPDATE g SET n = n + 1 WHERE k = 'held'")
            let blocked = (0..<6).map { _ in
                Task { try await pool.groupCommitted("UPDATE g SET n = n + 1 WHERE k = 'held'", key: "held") }
            }
            try await second.waitUntilBlocked(1)
            let started = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in 0..<20 {
                    group.addTask { try await pool.groupCommitted("INSERT INTO g VALUES (\("free\(n)"))", key: "free\(n)") }
                }
                try await group.waitForAll()
            }
            let took = ContinuousClock.now - started
            #expect(took < .seconds(2), "the free writes took \(took) behind the lock")
            // Every blocked write leaves its batch: three wait alone, each on its own connection; three are refused.
            let deadline = ContinuousClock.now + .seconds(10)
            while pool.statistics.writesLockWaitedAlone < 6, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            try await second.waitUntilBlocked(3)
            var refused = 0
            try await second.execute("COMMIT")
            for write in blocked {
                do {
                    _ = try await write.value
                } catch let error as PostgresError {
                    #expect(error.code == .poolTimeout, "\(error)")
                    refused += 1
                }
            }
            #expect(refused == 3)
            let held = try await pool.query("SELECT n FROM g WHERE k = 'held'").first?.require("n", as: Int.self)
            #expect(held == 4)
            #expect(try await pool.query("SELECT count(*)::int AS c FROM g").first?.require("c", as: Int.self) == 21)
            #expect(pool.statistics.writesLockWaitedAlone == 6)
        }
    }

    /// A key whose write waited for a lock in its batch is remembered for four lock waits: its next write skips the
    /// batch and waits alone from the start, so a row kept locked costs its lane one lock wait, not one per batch
    /// that carries a write of it. Once the memory ends, the key's writes are batched again.
    @Test func aKeyThatWaitedOnALockSkipsTheBatchForAWhile() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url, maxConnections: 12, acquireTimeout: .seconds(5)))
            defer { pool.close() }
            try await pool.query("CREATE TABLE g (k text PRIMARY KEY, n int NOT NULL DEFAULT 0)")
            try await pool.query("INSERT INTO g VALUES ('held')")
            let second = try await SecondSession(conninfo: url)
            try await second.execute("BEGIN; UPDATE g SET n = n + 1 WHERE k = 'held'")
            let update: PostgresQuery = "UPDATE g SET n = n + 1 WHERE k = 'held'"
            let first = Task { try await pool.groupCommitted(update, key: "held") }
            let deadline = ContinuousClock.now + .seconds(10)
            while pool.statistics.writesLockWaitedAlone < 1, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            let batchesBefore = pool.statistics.groupCommits
            let next = Task { try await pool.groupCommitted(update, key: "held") }
            try await second.waitUntilBlocked(2)
            #expect(pool.statistics.writesOfBlockedKeysAlone == 1)
            #expect(pool.statistics.writesLockWaitedAlone == 2)
            #expect(pool.statistics.groupCommits == batchesBefore, "the second write went through a batch")
            try await second.execute("COMMIT")
            _ = try await first.value
            _ = try await next.value
            // Forgotten after four lock waits (1 s): batched again.
            try await Task.sleep(for: .milliseconds(1100))
            try await pool.groupCommitted(update, key: "held")
            #expect(pool.statistics.writesOfBlockedKeysAlone == 1)
            #expect(try await pool.query("SELECT n FROM g WHERE k = 'held'").first?.require("n", as: Int.self) == 4)
        }
    }

    /// A batch that failed runs again one statement at a time; a connection lost on the second of them fails that
    /// one and the rest, and the first, committed alone, is answered as committed (it was answered as failed).
    /// Forced: the second statement ends its own session when it runs outside the first one's transaction.
    @Test func aConnectionLostWhileRunningAloneFailsOnlyWhatDidNotRun() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(PostgresPool.Configuration(conninfo: url, maxConnections: 4).waitingOnLocks())
            defer { pool.close() }
            try await pool.query("CREATE TABLE g (k text PRIMARY KEY)")
            try await pool.query("CREATE TABLE m (x text PRIMARY KEY)")
            let second = try await SecondSession(conninfo: url)
            try await second.execute("BEGIN; LOCK TABLE g IN EXCLUSIVE MODE")
            let leaders = ["l0", "l1"].map { key in
                Task { _ = try? await pool.groupCommitted("INSERT INTO g VALUES (\(key))", key: key) }
            }
            try await second.waitUntilBlocked(2)
            let statements: [(String, PostgresQuery)] = [
                ("a", "INSERT INTO m VALUES (pg_current_xact_id()::text)"),
                ("b", """
                    SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM m WHERE x = pg_current_xact_id()::text)
                        THEN pg_terminate_backend(pg_backend_pid()) END AS ended
                    """),
                ("c", "SELECT 1 / 0 AS never"),
            ]
            let queued = statements.map { key, query in
                Task { () -> Bool in (try? await pool.groupCommitted(query, key: key)) != nil }
            }
            let deadline = ContinuousClock.now + .seconds(10)
            while pool.statistics.queuedWrites < 3, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            try await second.execute("COMMIT")
            for task in leaders { await task.value }
            var answered: [Bool] = []
            for task in queued { answered.append(await task.value) }
            #expect(answered == [true, false, false])
            #expect(try await pool.query("SELECT count(*) AS n FROM m").first?.require("n", as: Int.self) == 1)
        }
    }

    /// The pool counts group commit's transactions, the writes they carry and the writes retried alone (what
    /// /metrics shows): two writes wait on a lock alone, five queue behind them, one of the five is bad.
    @Test func groupCommitIsCounted() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(PostgresPool.Configuration(conninfo: url, maxConnections: 4).waitingOnLocks())
            try await pool.query("CREATE TABLE g (k text PRIMARY KEY CHECK (k <> 'bad'))")
            let second = try await SecondSession(conninfo: url)
            try await second.execute("BEGIN; LOCK TABLE g IN EXCLUSIVE MODE")
            func write(_ key: String) -> Task<Void, Never> {
                Task { _ = try? await pool.groupCommitted("INSERT INTO g VALUES (\(key))", key: key) }
            }
            let leaders = ["l0", "l1"].map(write)
            try await second.waitUntilBlocked(2)
            let queued = ["q0", "q1", "bad", "q2", "q3"].map(write)
            let deadline = ContinuousClock.now + .seconds(10)
            while pool.statistics.queuedWrites < 5, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            try await second.execute("COMMIT")
            for task in leaders + queued { await task.value }
            let statistics = pool.statistics
            // Two alone, one batch of five that the bad write failed, then the five again one by one.
            #expect(statistics.groupCommittedWrites == 7)
            #expect(statistics.writesRetriedAlone == 5)
            #expect(statistics.groupCommits == 2 + 1 + 5)
            #expect(try await pool.query("SELECT count(*) AS n FROM g").first?.require("n", as: Int.self) == 6)
        }
    }
}

extension Result {
    var error: Failure? {
        if case let .failure(error) = self { return error }
        return nil
    }
}

extension PostgresPool.Configuration {
    /// Group-committed batches wait on a lock as long as it is held: the tests that take this hold one to line writes
    /// up behind it, and are about what the batches then do (the lock wait is `aWriteBlockedByALockLeavesItsBatch…`'s).
    func waitingOnLocks() -> Self {
        var configuration = self
        configuration.groupCommitLockWait = nil
        return configuration
    }
}
