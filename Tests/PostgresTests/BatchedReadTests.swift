import Foundation
import Testing
import TokenRegistryTesting

@testable import Postgres

/// Batched point reads (`PostgresPool.batchedRead`) against a live PostgreSQL: concurrent reads share a round trip,
/// each a transaction of its own; none waits behind writes, nor long behind a batch a lock holds up.
@Suite("Batched reads", .enabled(if: TestDatabase.isAvailable))
struct BatchedReadTests {
    func withDatabase(_ body: (String) async throws -> Void) async throws { try await TestDatabase.with(body) }

    /// A pool of four connections whose reads leave the queue after `readQueueLimit`, and the database's URL.
    func withPool(readQueueLimit: Duration, _ body: (PostgresPool, String) async throws -> Void) async throws {
        try await withDatabase { url in
            var configuration = PostgresPool.Configuration(conninfo: url, maxConnections: 4)
            configuration.readQueueLimit = readQueueLimit
            let pool = PostgresPool(configuration)
            defer { pool.close() }
            try await body(pool, url)
        }
    }

    /// Forced interleaving for batched reads: another session holds the table in ACCESS EXCLUSIVE mode, so the first
    /// two reads (the lane's slots) block in the database and the rest queue in the pool. Released, the queued reads
    /// go out in one round trip, each a transaction of its own: each answers its own row, and a read that fails
    /// (division by zero) fails alone while the others of its batch answer, none run twice.
    @Test func queuedReadsShareARoundTripAndABadOneFailsAlone() async throws {
        try await withPool(readQueueLimit: .seconds(30)) { pool, url in
            try await pool.query("CREATE TABLE r (k int PRIMARY KEY, v text)")
            try await pool.query("INSERT INTO r SELECT n, 'v' || n FROM generate_series(0, 29) AS n")
            let second = try await SecondSession(conninfo: url)
            func read(_ key: Int, divisor: Int = 1) -> Task<Result<String?, PostgresError>, Never> {
                Task {
                    do {
                        let rows = try await pool.batchedRead("SELECT v FROM r WHERE k = \(key) AND 1 / \(divisor) = 1")
                        return .success(try rows.first?.require("v", as: String.self))
                    } catch {
                        return .failure(error as! PostgresError)
                    }
                }
            }
            for round in ["good", "bad"] {
                let before = pool.statistics
                try await second.execute("BEGIN; LOCK TABLE r IN ACCESS EXCLUSIVE MODE")
                let leaders = [read(0), read(1)]
                try await second.waitUntilBlocked(2)
                // In the bad round, key 7's read divides by zero.
                let queued = (2..<12).map { read($0, divisor: round == "bad" && $0 == 7 ? 0 : 1) }
                let deadline = ContinuousClock.now + .seconds(10)
                while pool.statistics.queuedReads < queued.count, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(5))
                }
                #expect(pool.statistics.queuedReads == queued.count)
                // A write committed while the reads queue is seen by each of them: each takes its snapshot when it
                // runs, in its batch.
                try await second.execute("UPDATE r SET v = 'new' || k; COMMIT")
                for (key, leader) in zip(0..., leaders) {
                    let value = try await leader.value.get()
                    #expect(value == "v\(key)" || value == "new\(key)")
                }
                var failures = 0
                for (key, task) in zip(2..., queued) {
                    switch await task.value {
                    case let .success(value): #expect(value == "new\(key)", "read \(key)")
                    case let .failure(error):
                        failures += 1
                        #expect(round == "bad" && key == 7 && error.sqlState == "22012", "read \(key): \(error)")
                    }
                }
                #expect(failures == (round == "bad" ? 1 : 0))
                // The two that blocked, alone; then the ten queued, in one round trip, the bad one's too.
                let after = pool.statistics
                #expect(after.batchedReads - before.batchedReads == 12)
                #expect(after.readBatches - before.readBatches == 3)
                try await pool.query("UPDATE r SET v = 'v' || k")
            }
        }
    }

    /// Reads have slots of their own: with every group-commit slot taken by writes that wait on a lock, and more
    /// writes queued behind them, a batched read still answers at once (sharing the writes' batcher, it queued behind
    /// them until the lock went).
    @Test func aReadDoesNotQueueBehindWrites() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(PostgresPool.Configuration(conninfo: url, maxConnections: 6, acquireTimeout: .seconds(5)).waitingOnLocks())
            defer { pool.close() }
            try await pool.query("CREATE TABLE g (k text PRIMARY KEY)")
            try await pool.query("INSERT INTO g VALUES ('seen')")
            let second = try await SecondSession(conninfo: url)
            // EXCLUSIVE blocks writes and lets reads through.
            try await second.execute("BEGIN; LOCK TABLE g IN EXCLUSIVE MODE")
            let writes = (0..<5).map { n in
                Task { _ = try? await pool.groupCommitted("INSERT INTO g VALUES (\("w\(n)"))", key: "w\(n)") }
            }
            try await second.waitUntilBlocked(2)
            let deadline = ContinuousClock.now + .seconds(10)
            while pool.statistics.queuedWrites < 3, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            let started = ContinuousClock.now
            let read = try await pool.batchedRead("SELECT k FROM g WHERE k = 'seen'")
            // On the writes' batcher it would wait for the 5 s acquire time-out and fail.
            #expect(ContinuousClock.now - started < .seconds(3))
            #expect(try read.first?.require("k", as: String.self) == "seen")
            #expect(pool.statistics.queuedWrites == 3)
            try await second.execute("COMMIT")
            for write in writes { await write.value }
            #expect(try await pool.query("SELECT count(*) AS n FROM g").first?.require("n", as: Int.self) == 6)
        }
    }

    /// Forced interleaving: another session holds one table ACCESS EXCLUSIVE, and two reads of it take the lane's two
    /// batch slots, blocked. A read of another table queued behind them leaves the queue at the read queue limit and
    /// runs alone, answering while the lock is still held (it waited for the lock to go before).
    @Test func aReadQueuedBehindBlockedBatchesRunsAlone() async throws {
        try await withPool(readQueueLimit: .milliseconds(100)) { pool, url in
            try await pool.query("CREATE TABLE locked (k int PRIMARY KEY)")
            try await pool.query("CREATE TABLE free (k int PRIMARY KEY)")
            try await pool.query("INSERT INTO free VALUES (1)")
            let second = try await SecondSession(conninfo: url)
            try await second.execute("BEGIN; LOCK TABLE locked IN ACCESS EXCLUSIVE MODE")
            let blocked = (0..<2).map { n in Task { try? await pool.batchedRead("SELECT k FROM locked WHERE k = \(n)") } }
            try await second.waitUntilBlocked(2)
            let started = ContinuousClock.now
            let read = try await pool.batchedRead("SELECT k FROM free WHERE k = 1")
            let took = ContinuousClock.now - started
            #expect(try read.first?.require("k", as: Int.self) == 1)
            #expect(took < .seconds(2), "the read waited \(took) behind the blocked batches")
            #expect(pool.statistics.readsRunAlone == 1)
            try await second.execute("COMMIT")
            for task in blocked { _ = await task.value }
        }
    }
}
