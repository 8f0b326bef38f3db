/// One schema change: a numbered SQL script compiled into the binary.
public struct Migration: Sendable {
    public let version: Int
    public let name: String
    public let sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }
}

/// Applies migrations in order, each in its own transaction under a PostgreSQL advisory lock taken for that
/// transaction, so replicas that start together never race: the first applies a migration, the others wait on the
/// lock and then find it applied. The lock is a transaction's, not the session's, so migrating works through a
/// pooler in transaction mode too (a session lock would stay on whichever server connection took it).
public struct Migrator: Sendable {
    /// The advisory lock key (`'token-registry'` hashed to a constant).
    static let lockKey: Int64 = 0x746f6b656e726567

    public let migrations: [Migration]
    /// How long a migration's statement waits for a table's lock before its transaction gives up and is run again
    /// (`lock_timeout`). A DDL statement queued behind a long reader makes every later query of that table queue
    /// behind it, so on a live database the wait is kept short and retried, never open-ended.
    public var lockTimeout: Duration = .seconds(3)
    /// Attempts of a migration whose locks were not granted in time, a second apart, before migrating fails.
    public var lockAttempts = 20

    public init(migrations: [Migration]) {
        self.migrations = migrations.sorted { $0.version < $1.version }
    }

    /// Applies what is missing.
    ///
    /// - Returns: the versions applied by this call.
    @discardableResult
    public func migrate(conninfo: String) async throws -> [Int] {
        // Nothing kept on the session (statements unnamed), so that it runs through a transaction pooler too.
        let connection = try await PostgresConnection.connect(conninfo, settings: .init(transactionPooled: true))
        try await locked(on: connection) {
            try await connection.execute(
                """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    version integer PRIMARY KEY,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now())
                """)
        }
        let done = Set(try await versions(on: connection))
        var applied: [Int] = []
        for migration in migrations where !done.contains(migration.version) {
            let ran = try await retryingLockTimeouts(migration) { try await locked(on: connection) { () -> Bool in
                // Another replica may have applied it while this one waited for the lock.
                guard try await !versions(on: connection, only: migration.version).isEmpty else {
                    try await connection.execute(migration.sql)
                    _ = try await connection.query(
                        "INSERT INTO schema_migrations (version, name) VALUES (\(migration.version), \(migration.name))")
                    return true
                }
                return false
            } }
            if ran { applied.append(migration.version) }
        }
        return applied
    }

    private func versions(on connection: PostgresConnection, only version: Int? = nil) async throws -> [Int] {
        let rows = try await connection.query(
            "SELECT version FROM schema_migrations WHERE \(version)::int IS NULL OR version = \(version)::int")
        return try rows.map { try $0.require("version", as: Int.self) }
    }

    /// Runs `body` again while it fails for a lock not granted within ``lockTimeout`` (SQLSTATE 55P03), up to
    /// ``lockAttempts`` times.
    private func retryingLockTimeouts<T>(_ migration: Migration, _ body: () async throws -> T) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await body()
            } catch let error as PostgresError where error.sqlState == PostgresError.lockNotAvailable {
                guard attempt < lockAttempts else {
                    throw PostgresError(
                        .server, sqlState: error.sqlState,
                        message: "migration \(migration.version) (\(migration.name)): a table it changes stayed "
                            + "locked by other sessions through \(lockAttempts) attempts of \(lockTimeout) each; "
                            + "see pg_stat_activity for long transactions, then migrate again")
                }
                attempt += 1
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// Runs `body` in a transaction holding the migration lock, its other lock waits bounded by ``lockTimeout``.
    private func locked<T: Sendable>(on connection: PostgresConnection, _ body: () async throws -> T) async throws -> T {
        try await connection.execute("BEGIN")
        do {
            // The advisory lock waits as long as another migrator runs; only then are the table locks bounded.
            _ = try await connection.query("SELECT pg_advisory_xact_lock(\(Migrator.lockKey))::text AS locked")
            // client_min_messages here too: the migrator's connection is set up for a pooler (nothing on the session),
            // and a NOTICE ("already exists, skipping") would otherwise reach standard error in plain text.
            try await connection.execute(
                "SET LOCAL lock_timeout = \(max(1, Int((lockTimeout / .milliseconds(1)).rounded(.up))));"
                    + " SET LOCAL client_min_messages = warning")
            let value = try await body()
            try await connection.execute("COMMIT")
            return value
        } catch {
            try? await connection.execute("ROLLBACK")
            throw error
        }
    }

    /// True when every known migration is applied (readiness).
    public func isCurrent(on pool: PostgresPool) async throws -> Bool {
        let latest = migrations.last?.version ?? 0
        let rows = try await pool.query("SELECT coalesce(max(version), 0) AS v FROM schema_migrations")
        return try rows.first?.require("v", as: Int.self) ?? 0 >= latest
    }
}
