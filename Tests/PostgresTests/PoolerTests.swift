import Foundation
import Postgres
import Testing
import TokenRegistryTesting

/// The driver behind pgbouncer in transaction mode (`transactionPooled`): every transaction may run on another server
/// connection, so nothing may be left on a session between transactions.
@Suite("PostgreSQL through a transaction pooler", .enabled(if: Pgbouncer.isAvailable))
struct PoolerTests {
    func withBouncer(poolSize: Int, _ body: (Pgbouncer, String) async throws -> Void) async throws {
        let bouncer = try await Pgbouncer(poolSize: poolSize)
        do {
            try await TestDatabase.with { url in try await body(bouncer, bouncer.url(for: url)) }
        } catch {
            await bouncer.shutdown()
            throw error
        }
        await bouncer.shutdown()
    }

    /// The failure the setting exists for, forced: two clients on pgbouncer's one server connection both name their
    /// first statement `s1`. With names, the second `Parse` meets the first's; unnamed, both run.
    @Test func namedStatementsCollideOnASharedServerConnectionAndUnnamedOnesDoNot() async throws {
        try await withBouncer(poolSize: 1) { _, url in
            let one = try await PostgresConnection.connect(url)
            let two = try await PostgresConnection.connect(url)
            _ = try await one.query("SELECT 1 AS one")
            await #expect(throws: PostgresError.self) { _ = try await two.query("SELECT 2 AS two") }

            let pooled = PostgresConnection.SessionSettings(transactionPooled: true)
            let three = try await PostgresConnection.connect(url, settings: pooled)
            let four = try await PostgresConnection.connect(url, settings: pooled)
            for n in 0..<5 {
                #expect(try await three.query("SELECT \(n)::int AS n").first?.require("n", as: Int.self) == n)
                #expect(try await four.query("SELECT \(n + 1)::int AS n").first?.require("n", as: Int.self) == n + 1)
            }
        }
    }

    /// A pooled client sets nothing on the session of the server connection it shares: a client without the setting
    /// that gets the same server connection next sees the server's defaults.
    @Test func aPooledClientLeavesNoSettingOnTheSharedServerConnection() async throws {
        try await withBouncer(poolSize: 1) { _, url in
            let pooled = try await PostgresConnection.connect(
                url, settings: .init(statementTimeoutMillis: 1234, transactionPooled: true))
            #expect(try await pooled.query("SHOW statement_timeout").first?.require("statement_timeout") == "1234ms")
            #expect(try await pooled.query("SHOW client_min_messages").first?.require("client_min_messages") == "warning")
            // psql, a client that sets nothing, on the pool's one server connection.
            let psql = Process()
            psql.executableURL = URL(fileURLWithPath: "/usr/bin/psql")
            psql.arguments = [url, "-Atc", "SHOW statement_timeout; SHOW client_min_messages"]
            let out = Pipe()
            psql.standardOutput = out
            try psql.run()
            psql.waitUntilExit()
            let shown = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                .split(separator: "\n").map(String.init)
            #expect(shown == ["0", "notice"], "the shared server connection kept a client's settings: \(shown)")
        }
    }

    /// Many more client connections than server ones, statements and transactions interleaved: every one answers
    /// its own result and every write is there afterwards.
    @Test func aPoolOfMoreConnectionsThanTheServersRunsStatementsAndTransactions() async throws {
        try await withBouncer(poolSize: 2) { _, url in
            // A long acquire: the suite runs in parallel, and the point here is correctness, not time.
            let pool = PostgresPool(
                .init(conninfo: url, maxConnections: 12, acquireTimeout: .seconds(120), transactionPooled: true))
            defer { pool.close() }
            try await pool.query("CREATE TABLE w (n int PRIMARY KEY, v text)")
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in 0..<300 {
                    group.addTask {
                        switch n % 3 {
                        case 0:
                            let echoed = try await pool.query("SELECT \(n)::int AS n, \("v\(n)")::text AS v").first
                            #expect(try echoed?.require("n", as: Int.self) == n)
                            try await pool.groupCommitted("INSERT INTO w VALUES (\(n), 'single')", key: "\(n)")
                        case 1:
                            try await pool.withTransaction { c in
                                try await c.query("INSERT INTO w VALUES (\(n), 'transaction')")
                                let seen = try await c.query("SELECT count(*) AS k FROM w WHERE n = \(n)").first
                                #expect(try seen?.require("k", as: Int.self) == 1)
                            }
                        default:
                            let results = try await pool.withConnection { c in
                                try await c.pipeline([
                                    "INSERT INTO w VALUES (\(n), 'pipeline')", "SELECT \(n)::int AS n",
                                ])
                            }
                            #expect(results.allSatisfy { $0.error == nil })
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await pool.query("SELECT count(*) AS k FROM w").first?.require("k", as: Int.self) == 300)
        }
    }

    /// The statement timeout is set in each transaction, not once a session: every statement, on whichever server
    /// connection it lands, outside a transaction or in one, is ended by it.
    @Test func theStatementTimeoutHoldsInEveryTransaction() async throws {
        try await withBouncer(poolSize: 2) { _, url in
            let pool = PostgresPool(
                .init(conninfo: url, maxConnections: 6, statementTimeout: .milliseconds(300), transactionPooled: true))
            defer { pool.close() }
            let started = ContinuousClock.now
            let codes = try await withThrowingTaskGroup(of: String?.self) { group in
                for n in 0..<6 {
                    group.addTask {
                        do {
                            if n.isMultiple(of: 2) {
                                try await pool.query("SELECT pg_sleep(3)")
                            } else {
                                try await pool.withTransaction { c in
                                    try await c.query("SELECT 1 AS one")
                                    try await c.query("SELECT pg_sleep(3)")
                                }
                            }
                            return nil
                        } catch let error as PostgresError {
                            return error.sqlState
                        }
                    }
                }
                var codes: [String?] = []
                for try await code in group { codes.append(code) }
                return codes
            }
            #expect(codes == Array(repeating: "57014", count: 6))
            // Six statements of 0.3 s on two server connections: about 0.9 s; six whole sleeps would take 9 s.
            #expect(ContinuousClock.now - started < .seconds(6))
        }
    }

    /// Batched reads through the pooler: each read of a batch is a transaction of its own, with the statement timeout
    /// set in it. One read that sleeps past the timeout fails alone (57014); the others of its round trip answer.
    @Test func batchedReadsEachRunUnderTheStatementTimeout() async throws {
        try await withBouncer(poolSize: 2) { _, url in
            let connection = try await PostgresConnection.connect(
                url, settings: .init(statementTimeoutMillis: 300, transactionPooled: true))
            let started = ContinuousClock.now
            let outcomes = try await connection.pipelineSeparately([
                "SELECT 1 AS n", "SELECT pg_sleep(3) AS n", "SELECT 3 AS n",
                "SELECT current_setting('statement_timeout') AS n",
            ])
            #expect(try outcomes[0].get().first?.require("n", as: Int.self) == 1)
            if case let .failure(error) = outcomes[1] { #expect(error.sqlState == "57014") } else {
                Issue.record("the sleep outlived the statement timeout")
            }
            #expect(try outcomes[2].get().first?.require("n", as: Int.self) == 3)
            #expect(try outcomes[3].get().first?.require("n", as: String.self) == "300ms")
            // The sleep ended by the timeout: well under its 3 s.
            #expect(ContinuousClock.now - started < .milliseconds(2700))
            #expect(connection.isHealthy && !connection.isInTransaction)
        }
    }

    /// Replicas migrating together through the pooler: the lock is the transaction's, so each migration is applied
    /// once and none waits on a lock a session left behind.
    @Test func concurrentMigratorsThroughThePoolerApplyEachMigrationOnce() async throws {
        try await withBouncer(poolSize: 2) { _, url in
            let migrator = Migrator(migrations: [
                Migration(version: 1, name: "one", sql: "CREATE TABLE one (v int); INSERT INTO one VALUES (1)"),
                Migration(version: 2, name: "two", sql: "INSERT INTO one VALUES (2)"),
                Migration(version: 3, name: "three", sql: "INSERT INTO one VALUES (3)"),
            ])
            let applied = try await withThrowingTaskGroup(of: [Int].self) { group in
                for _ in 0..<4 { group.addTask { try await migrator.migrate(conninfo: url) } }
                var all: [Int] = []
                for try await a in group { all += a }
                return all
            }
            #expect(applied.sorted() == [1, 2, 3])
            let pool = PostgresPool(.init(conninfo: url, transactionPooled: true))
            defer { pool.close() }
            #expect(try await pool.query("SELECT count(*) AS n FROM one").first?.require("n", as: Int.self) == 3)
        }
    }
}
