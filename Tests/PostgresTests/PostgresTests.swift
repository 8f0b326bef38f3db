import Foundation
import Testing
import TokenRegistryTesting

@testable import Postgres

@Suite("PostgreSQL layer", .enabled(if: TestDatabase.isAvailable))
struct PostgresTests {
    func withDatabase(_ body: (String) async throws -> Void) async throws { try await TestDatabase.with(body) }

    @Test func bindsValuesNeverSplicesThem() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url))
            let hostile = "'; DROP TABLE x; --"
            let rows = try await pool.query(
                "SELECT \(hostile)::text AS v, \(42)::int AS n, \(true)::bool AS b, \(String?.none as String?)::text AS z"
            )
            let row = try #require(rows.first)
            #expect(try row.require("v", as: String.self) == hostile)
            #expect(try row.require("n", as: Int.self) == 42)
            #expect(try row.require("b", as: Bool.self) == true)
            #expect(try row.decode("z", as: String.self) == nil)
        }
    }

    /// A parameter holding NUL is refused before anything is sent, wherever the NUL is, in a statement alone, a
    /// pipeline or a transaction: libpq would cut it there and the statement would run on another value
    /// (`crm\0x` matching the row `crm`). Nothing is written, and the connection stays usable.
    @Test func aParameterHoldingNULIsRefusedNeverCut() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url))
            try await pool.query("CREATE TABLE named (name text PRIMARY KEY)")
            try await pool.query("INSERT INTO named VALUES ('crm')")
            for value in ["\u{0}", "crm\u{0}", "crm\u{0}x", "\u{0}crm", "c\u{0}r\u{0}m"] {
                await #expect(throws: PostgresError.self) {
                    try await pool.query("UPDATE named SET name = 'cut' WHERE name = \(value)")
                }
                await #expect(throws: PostgresError.self) {
                    try await pool.withTransaction { c in
                        try await c.query("INSERT INTO named VALUES ('in-transaction')")
                        try await c.query("SELECT \(value)::text AS v")
                    }
                }
                let error = try await pool.withConnection { c in
                    try await c.pipeline(["SELECT 1", "SELECT \(value)::text"])
                }
                guard case let .failure(refused) = error[1] else {
                    Issue.record("\(value.debugDescription) ran"); continue
                }
                #expect(refused.sqlState == "22021")
            }
            let names = try await pool.query("SELECT name FROM named ORDER BY name").map {
                try $0.require("name", as: String.self)
            }
            #expect(names == ["crm"])
        }
    }

    /// Dates are bound as Julian days (``Date/postgresText``): PostgreSQL must read each as the same microsecond.
    @Test func datesAreReadByPostgreSQLToTheMicrosecond() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url))
            var generator = SystemRandomNumberGenerator()
            // Microseconds from 1906 to 2033 (where a Double holds a microsecond, nudged up a third of one so it
            // rounds down to itself), and whole seconds from the year 1 to 9999.
            var micros: [Int64] = [0, -1, 1, 86_400_000_000 - 1, 86_400_000_000, -86_400_000_000, -86_400_000_001]
            for _ in 0..<3_000 {
                micros.append(Int64.random(in: -2_000_000_000_000_000...2_000_000_000_000_000, using: &generator))
            }
            var dates = micros.map { Date(timeIntervalSince1970: (Double($0) + 0.3) / 1_000_000) }
            for _ in 0..<2_000 {
                let seconds = Int64.random(in: -62_135_596_800...253_402_300_799, using: &generator)
                micros.append(seconds * 1_000_000)
                dates.append(Date(timeIntervalSince1970: Double(seconds)))
            }
            let rows = try await pool.query(
                """
                SELECT (extract(epoch FROM t::timestamptz) * 1000000)::bigint AS micros, t::timestamptz AS printed
                FROM unnest(\(TextArray(dates.map { $0.postgresText! }))::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n
                """)
            #expect(rows.count == micros.count)
            for (row, (expected, date)) in zip(rows, zip(micros, dates)) {
                #expect(try row.require("micros", as: Int64.self) == expected, "\(date.postgresText!)")
                let printed = try row.require("printed", as: Date.self)
                #expect(abs(printed.timeIntervalSince1970 - date.timeIntervalSince1970) < 0.000_002)
            }
            let ends = try await pool.query(
                "SELECT \(Date(timeIntervalSince1970: 1e13))::timestamptz AS a, \(Date.distantPast)::timestamptz AS b, \(Date(timeIntervalSince1970: -3e11))::text AS c"
            )
            #expect(try ends.first?.require("c", as: String.self) == "-infinity")
            _ = try ends.first?.require("a", as: String.self)
        }
    }

    @Test func typesRoundTrip() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url))
            let date = Date(timeIntervalSince1970: 1_764_000_000.123456)
            let bytes = ByteA([0, 1, 254, 255])
            let row = try #require(
                try await pool.query(
                    "SELECT \(date)::timestamptz AS d, \(bytes)::bytea AS b, \(TextArray(["a", "b\"c", "d\\e"]))::text[] AS a"
                ).first)
            let back = try row.require("d", as: Date.self)
            #expect(abs(back.timeIntervalSince1970 - date.timeIntervalSince1970) < 0.000002)
            #expect(try row.require("b", as: ByteA.self) == bytes)
            let count = try await pool.query("SELECT cardinality(\(TextArray(["x", "y,z", "}"]))::text[]) AS n")
            #expect(try count.first?.require("n", as: Int.self) == 3)
        }
    }

    /// A statement's parameters travel in one buffer (``withCStrings``): empty, NULL, multi-byte and long values
    /// side by side must each arrive whole.
    @Test func parametersOfEveryShapeArriveWhole() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url))
            let long = String(repeating: "ab€", count: 3_000)
            let values: [String?] = ["", nil, "é😀", long, "x", nil, ""]
            let row = try #require(
                try await pool.query(
                    "SELECT \(values[0])::text AS a, \(values[1])::text AS b, \(values[2])::text AS c, \(values[3])::text AS d, \(values[4])::text AS e, \(values[5])::text AS f, \(values[6])::text AS g"
                ).first)
            for (column, value) in zip(["a", "b", "c", "d", "e", "f", "g"], values) {
                #expect(try row.decode(column, as: String.self) == value, "\(column)")
            }
        }
    }

    /// A connection shares the column names of results with the same columns: results with as many columns but
    /// other names, and the same names again, must each read by their own names.
    @Test func eachResultIsReadByItsOwnColumnNames() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url, maxConnections: 1))
            for round in 0..<3 {
                let first = try #require(try await pool.query("SELECT 1 AS a, 2 AS b").first)
                #expect(try first.require("a", as: Int.self) == 1 && first.require("b", as: Int.self) == 2)
                let swapped = try #require(try await pool.query("SELECT 3 AS b, 4 AS a").first)
                #expect(try swapped.require("a", as: Int.self) == 4 && swapped.require("b", as: Int.self) == 3)
                let other = try #require(try await pool.query("SELECT 5 AS \(unsafeSQL: "c\(round)"), 6 AS ab").first)
                #expect(try other.require("c\(round)", as: Int.self) == 5 && other.require("ab", as: Int.self) == 6)
                #expect(throws: PostgresError.self) { try other.decode("a", as: Int.self) }
            }
            // More shapes than the connection remembers.
            for n in 0..<40 {
                let row = try #require(try await pool.query("SELECT \(n)::int AS \(unsafeSQL: "n\(n)"), 0 AS z").first)
                #expect(try row.require("n\(n)", as: Int.self) == n)
            }
        }
    }

    /// A session setting the server refuses fails the connection: it never runs on without the bound it sets.
    @Test func aRefusedSessionSettingFailsTheConnection() async throws {
        try await withDatabase { url in
            let fine = try await PostgresConnection.connect(url, settings: .init(statementTimeoutMillis: 5000))
            #expect(try await fine.query("SHOW statement_timeout").first?.require("statement_timeout") == "5s")
            await #expect(throws: PostgresError.self) {
                _ = try await PostgresConnection.connect(url, settings: .init(statementTimeoutMillis: -1))
            }
        }
    }

    @Test func sqlStateIsReported() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url))
            do {
                try await pool.query("SELECT * FROM no_such_table")
                Issue.record("expected an error")
            } catch let error as PostgresError {
                #expect(error.sqlState == "42P01")
                #expect(!error.isUnavailable)
            }
            // The connection stays usable after an error.
            #expect(try await pool.query("SELECT 1 AS one").first?.require("one", as: Int.self) == 1)
        }
    }

    @Test func transactionsCommitOrRollBack() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url))
            try await pool.query("CREATE TABLE t (v int PRIMARY KEY)")
            try await pool.withTransaction { try await $0.query("INSERT INTO t VALUES (\(1))") }
            do {
                try await pool.withTransaction { c in
                    try await c.query("INSERT INTO t VALUES (\(2))")
                    try await c.query("INSERT INTO t VALUES (\(1))")
                }
            } catch let error as PostgresError {
                #expect(error.sqlState == PostgresError.uniqueViolation)
            }
            let rows = try await pool.query("SELECT count(*) AS n FROM t")
            #expect(try rows.first?.require("n", as: Int.self) == 1)
        }
    }

    @Test func poolWaitsAndTimesOut() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url, maxConnections: 1, acquireTimeout: .milliseconds(200)))
            async let slow: PostgresRows = pool.query("SELECT pg_sleep(0.6)")
            try await Task.sleep(for: .milliseconds(50))
            do {
                try await pool.query("SELECT 1")
                Issue.record("expected a pool timeout")
            } catch let error as PostgresError {
                #expect(error.code == .poolTimeout)
                #expect(error.isUnavailable)
            }
            _ = try await slow
            #expect(try await pool.query("SELECT 1 AS one").count == 1)
        }
    }

    @Test func aCancelledWaiterLeavesNoWaiterAndLeaksNoConnection() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url, maxConnections: 1, acquireTimeout: .seconds(30)))
            async let slow: PostgresRows = pool.query("SELECT pg_sleep(0.3)")
            try await Task.sleep(for: .milliseconds(50))
            let waiter = Task { try await pool.query("SELECT 1") }
            try await Task.sleep(for: .milliseconds(50))
            #expect(pool.statistics.waiting == 1)
            waiter.cancel()
            await #expect(throws: CancellationError.self) { _ = try await waiter.value }
            #expect(pool.statistics.waiting == 0)
            _ = try await slow
            #expect(pool.statistics.inUse == 0 && pool.statistics.idle == 1)
            #expect(try await pool.query("SELECT 1 AS one").count == 1)
        }
    }

    @Test func aStatementTimeoutEndsASlowStatement() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url, maxConnections: 1, statementTimeout: .milliseconds(500)))
            // Connected first: the clock measures the statement, not a connection set up on a loaded machine (the
            // test runs in the suite's timing group, one at a time).
            #expect(try await pool.query("SELECT 1 AS one").count == 1)
            let started = ContinuousClock.now
            do {
                try await pool.query("SELECT pg_sleep(5)")
                Issue.record("expected the statement timeout")
            } catch let error as PostgresError {
                #expect(error.sqlState == "57014")
            }
            #expect(ContinuousClock.now - started < .seconds(3))
            #expect(try await pool.query("SELECT 1 AS one").count == 1)
        }
    }

    @Test func aClosedPoolRefusesAndItsWaitersFail() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url, maxConnections: 1, acquireTimeout: .seconds(30)))
            async let slow: PostgresRows = pool.query("SELECT pg_sleep(0.3)")
            try await Task.sleep(for: .milliseconds(50))
            let waiter = Task { try await pool.query("SELECT 1") }
            try await Task.sleep(for: .milliseconds(50))
            pool.close()
            await #expect(throws: PostgresError.self) { _ = try await waiter.value }
            await #expect(throws: PostgresError.self) { try await pool.query("SELECT 1") }
            _ = try await slow
            #expect(pool.statistics.inUse == 0 && pool.statistics.idle == 0)
        }
    }

    @Test func reconnectsAfterTheServerDropsTheConnection() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url, maxConnections: 1))
            let pid = try #require(
                try await pool.query("SELECT pg_backend_pid() AS p").first?.require("p", as: Int.self))
            let admin = try await PostgresConnection.connect(url)
            try await admin.query("SELECT pg_terminate_backend(\(pid))")
            var recovered = false
            for _ in 0..<3 where !recovered {
                recovered = (try? await pool.query("SELECT 1 AS one")) != nil
            }
            #expect(recovered)
        }
    }

    /// After a failover the old primary may still answer, read-only: the write fails as unavailable (503, retry)
    /// and that connection is never handed out again, so the next one is opened where writes go.
    @Test func aConnectionToAServerThatTurnedReadOnlyIsReplaced() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url, maxConnections: 1))
            try await pool.query("CREATE TABLE t (v int)")
            let before = try #require(
                try await pool.withConnection { c in
                    try await c.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
                    return try await c.query("SELECT pg_backend_pid() AS p").first?.require("p", as: Int.self)
                })
            do {
                try await pool.withTransaction { try await $0.query("INSERT INTO t VALUES (1)") }
                Issue.record("expected the read-only server to refuse the write")
            } catch let error as PostgresError {
                #expect(error.sqlState == PostgresError.readOnlySQLTransaction && error.isUnavailable)
            }
            try await pool.query("INSERT INTO t VALUES (2)")
            let after = try #require(
                try await pool.query("SELECT pg_backend_pid() AS p").first?.require("p", as: Int.self))
            #expect(after != before)
        }
    }

    @Test func unreachableDatabaseFailsFastAsUnavailable() async throws {
        let pool = PostgresPool(.init(conninfo: "host=127.0.0.1 port=1 dbname=x user=x connect_timeout=2"))
        for _ in 0..<3 {
            do {
                try await pool.query("SELECT 1")
                Issue.record("expected failure")
            } catch let error as PostgresError {
                #expect(error.isUnavailable)
            }
        }
    }

    /// A migration's DDL queued behind a long reader would queue every later query of the table behind it: its wait
    /// is bounded (lock_timeout) and retried, so readers wait at most one timeout, and the migration runs once the
    /// reader is gone. Forced: another session holds the table while the migration runs and readers read.
    @Test func aMigrationBlockedByAReaderHoldsUpOtherReadersOnlyBriefly() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url))
            defer { pool.close() }
            try await pool.query("CREATE TABLE busy (v int)")
            _ = try await pool.query("SELECT count(*) AS n FROM busy")  // the pool's connection, opened before the clock
            let holder = try await PostgresConnection.connect(url)
            try await holder.execute("BEGIN; SELECT * FROM busy")
            var migrator = Migrator(migrations: [
                Migration(version: 1, name: "alter", sql: "ALTER TABLE busy ADD COLUMN w int")
            ])
            migrator.lockTimeout = .milliseconds(200)
            migrator.lockAttempts = 60
            let migrating = Task { try await migrator.migrate(conninfo: url) }
            let release = Task {
                try await Task.sleep(for: .seconds(6))
                try await holder.execute("COMMIT")
            }
            var slowest: Duration = .zero
            for _ in 0..<8 {
                try await Task.sleep(for: .milliseconds(300))
                let start = ContinuousClock.now
                _ = try await pool.query("SELECT count(*) AS n FROM busy")
                slowest = max(slowest, ContinuousClock.now - start)
            }
            #expect(slowest < .seconds(2.5), "a reader waited \(slowest) behind the migration")
            try await release.value
            #expect(try await migrating.value == [1])
            #expect(try await pool.query("SELECT w FROM busy").isEmpty)
        }
    }

    @Test func aMigrationThatNeverGetsItsLocksFailsNamingIt() async throws {
        try await withDatabase { url in
            let holder = try await PostgresConnection.connect(url)
            try await holder.execute("CREATE TABLE held (v int)")
            try await holder.execute("BEGIN; LOCK TABLE held IN ACCESS SHARE MODE")
            var migrator = Migrator(migrations: [Migration(version: 1, name: "alter", sql: "DROP TABLE held")])
            migrator.lockTimeout = .milliseconds(50)
            migrator.lockAttempts = 2
            do {
                _ = try await migrator.migrate(conninfo: url)
                Issue.record("the migration ran while the table was held")
            } catch let error as PostgresError {
                #expect(error.sqlState == PostgresError.lockNotAvailable)
                #expect(error.message.contains("migration 1 (alter)"), "\(error)")
            }
            try await holder.execute("ROLLBACK")
        }
    }

    @Test func concurrentMigratorsApplyEachMigrationOnce() async throws {
        try await withDatabase { url in
            let migrator = Migrator(migrations: [
                Migration(version: 1, name: "one", sql: "CREATE TABLE one (v int); INSERT INTO one VALUES (1)"),
                Migration(version: 2, name: "two", sql: "INSERT INTO one VALUES (2)"),
            ])
            let applied = try await withThrowingTaskGroup(of: [Int].self) { group in
                for _ in 0..<3 { group.addTask { try await migrator.migrate(conninfo: url) } }
                var all: [Int] = []
                for try await a in group { all += a }
                return all
            }
            #expect(applied.sorted() == [1, 2])
            let pool = PostgresPool(.init(conninfo: url))
            #expect(try await pool.query("SELECT count(*) AS n FROM one").first?.require("n", as: Int.self) == 2)
            #expect(try await migrator.isCurrent(on: pool))
        }
    }
}

/// The text timestamps PostgreSQL prints, parsed without `timegm`, held against it.
@Suite("PostgreSQL timestamps")
struct PostgresTimestampTests {
    @Test func parsedTimestampsAgreeWithTimegm() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let seconds = Int.random(in: -62_135_596_800...253_402_300_799, using: &generator)
            let micros = Int.random(in: 0..<1_000_000, using: &generator)
            let date = Date(timeIntervalSince1970: Double(seconds) + Double(micros) / 1_000_000)
            var t = time_t(seconds)
            var parts = tm()
            gmtime_r(&t, &parts)
            let text =
                String(
                    format: "%04d-%02d-%02d %02d:%02d:%02d", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                    parts.tm_hour, parts.tm_min, parts.tm_sec) + String(format: ".%06d+00", micros)
            guard let parsed = Date(postgresText: text) else {
                Issue.record("\(text) did not parse")
                return
            }
            let day = Date.days(year: Int(parts.tm_year) + 1900, month: Int(parts.tm_mon) + 1, day: Int(parts.tm_mday))
            #expect(day * 86_400 + Int(parts.tm_hour) * 3600 + Int(parts.tm_min) * 60 + Int(parts.tm_sec) == seconds)
            #expect(
                abs(parsed.timeIntervalSince1970 - date.timeIntervalSince1970) <= 0.000_002 + 8
                    * date.timeIntervalSince1970.ulp)
        }
        #expect(Date(postgresText: "2026-12-01 03:04:05.5+02")?.timeIntervalSince1970 == 1_796_087_045.5)
        #expect(Date(postgresText: "2026-13-01 03:04:05+00") == nil)
        #expect(Date(postgresText: "2026-12-00 03:04:05+00") == nil)
    }
}

@Suite("PostgreSQL bytea")
struct PostgresByteATests {
    /// Random bytes written as hex and read back; every malformed shape (no `\x`, odd length, a non-hex digit) is nil.
    @Test func hexRoundTripsAndMalformedTextIsRefused() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let bytes = (0..<Int.random(in: 0...64, using: &generator)).map { _ in
                UInt8.random(in: 0...255, using: &generator)
            }
            let text = ByteA(bytes).postgresText!
            #expect(ByteA(postgresText: text)?.bytes == bytes)
            #expect(ByteA(postgresText: text.uppercased().replacingOccurrences(of: "\\X", with: "\\x"))?.bytes == bytes)
            #expect(ByteA(postgresText: text + "a") == nil)
            if !bytes.isEmpty {
                var broken = Array(text.utf8)
                broken[Int.random(in: 2..<broken.count, using: &generator)] = UInt8(ascii: "g")
                #expect(ByteA(postgresText: String(decoding: broken, as: UTF8.self)) == nil)
            }
        }
        #expect(ByteA(postgresText: "") == nil)
        #expect(ByteA(postgresText: "x00") == nil)
        #expect(ByteA(postgresText: "\\x")?.bytes == [])
    }
}
