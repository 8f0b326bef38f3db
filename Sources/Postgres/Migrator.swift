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

/// Applies migrations in order, each in its own transaction, under a PostgreSQL advisory lock, so replicas
/// that start together never race: the first applies, the others wait and then find nothing to do.
public struct Migrator: Sendable {
    /// The advisory lock key (`'token-registry'` hashed to a constant).
    static let lockKey: Int64 = 0x746f6b656e726567

    public let migrations: [Migration]

    public init(migrations: [Migration]) {
        self.migrations = migrations.sorted { $0.version < $1.version }
    }

    /// Applies what is missing.
    ///
    /// - Returns: the versions applied by this call.
    @discardableResult
    public func migrate(conninfo: String) async throws -> [Int] {
        let connection = try await PostgresConnection.connect(conninfo)
        try await connection.query("SELECT pg_advisory_lock(\(Migrator.lockKey))")
        do {
            let applied = try await apply(on: connection)
            _ = try await connection.query("SELECT pg_advisory_unlock(\(Migrator.lockKey))")
            return applied
        } catch {
            _ = try? await connection.query("SELECT pg_advisory_unlock(\(Migrator.lockKey))")
            throw error
        }
    }

    private func apply(on connection: PostgresConnection) async throws -> [Int] {
        try await connection.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version integer PRIMARY KEY,
                name text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())
            """)
        let done = Set(
            try await connection.query("SELECT version FROM schema_migrations").map {
                try $0.require("version", as: Int.self)
            })
        var applied: [Int] = []
        for migration in migrations where !done.contains(migration.version) {
            try await connection.execute("BEGIN")
            do {
                try await connection.execute(migration.sql)
                _ = try await connection.query(
                    "INSERT INTO schema_migrations (version, name) VALUES (\(migration.version), \(migration.name))")
                try await connection.execute("COMMIT")
            } catch {
                try? await connection.execute("ROLLBACK")
                throw error
            }
            applied.append(migration.version)
        }
        return applied
    }

    /// True when every known migration is applied (readiness).
    public func isCurrent(on pool: PostgresPool) async throws -> Bool {
        let latest = migrations.last?.version ?? 0
        let rows = try await pool.query("SELECT coalesce(max(version), 0) AS v FROM schema_migrations")
        return try rows.first?.require("v", as: Int.self) ?? 0 >= latest
    }
}
