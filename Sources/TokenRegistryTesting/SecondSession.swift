import Foundation
import Postgres
import RegistryPostgres

/// A database session of the test's own, beside the service's pool: it takes a lock the requests under test will
/// need, waits until they queue behind it, and lets them go, so a test forces one interleaving every time instead
/// of hoping for it.
public final class SecondSession: Sendable {
    let connection: PostgresConnection
    /// Watches `pg_stat_activity` from outside any transaction (inside one, the view is a frozen snapshot).
    let monitor: PostgresConnection
    let database: String

    public init(conninfo: String) async throws {
        connection = try await PostgresConnection.connect(conninfo)
        monitor = try await PostgresConnection.connect(conninfo)
        database = try await connection.query("SELECT current_database() AS db").first?.require("db") ?? ""
    }

    /// Runs statements as they are (the test's own SQL, no client input).
    public func execute(_ sql: String) async throws { try await connection.execute(sql) }

    public func query(_ query: PostgresQuery) async throws -> PostgresRows { try await connection.query(query) }

    /// Takes, in this session's open transaction, the lock the service takes for `userID` of `projectID`, a user
    /// bound to an installation now: the key is the user's keyed hash, which the store keeps beside the binding
    /// (the deployment's key is sealed; a test reads the hash, not the key).
    public func lockUser(_ userID: String, projectID: String) async throws {
        guard let hash = try await connection.query(
            """
            SELECT user_hmac FROM user_bindings WHERE project_id = \(projectID) AND user_id = \(userID) LIMIT 1
            """
        ).first?.require("user_hmac", as: ByteA.self)
        else { throw SessionError(description: "user \(userID) is bound to no installation") }
        let lock = PostgresRegistry.userLock(userHash: hash.bytes)
        _ = try await connection.query(
            "SELECT pg_advisory_xact_lock(\(Int(lock.class))::int, \(Int(lock.key))::int)::text AS held")
    }

    /// Sessions of this database waiting for a lock now (other than this one).
    public func blocked() async throws -> Int {
        try await monitor.query(
            """
            SELECT count(*) AS n FROM pg_stat_activity
            WHERE datname = \(database) AND wait_event_type = 'Lock' AND state = 'active'
            """
        ).first?.require("n") ?? 0
    }

    public func debugSessions() async throws -> [String] {
        try await monitor.query(
            """
            SELECT coalesce(wait_event_type, '-') || ':' || coalesce(wait_event, '-') || ' ' || state || ' '
                || left(query, 300) AS s
            FROM pg_stat_activity WHERE datname = \(database) AND pid <> pg_backend_pid()
            """
        ).map { try $0.require("s", as: String.self) }
    }

    /// Waits until `count` sessions queue behind a lock.
    ///
    /// - Throws: when they have not within `timeout`.
    public func waitUntilBlocked(_ count: Int, timeout: Duration = .seconds(10)) async throws {
        let deadline = ContinuousClock.now + timeout
        while try await blocked() < count {
            guard ContinuousClock.now < deadline else {
                let sessions = try await monitor.query(
                    """
                    SELECT coalesce(wait_event_type, '-') || ':' || coalesce(wait_event, '-') || ' ' || state || ' '
                        || left(query, 80) AS s
                    FROM pg_stat_activity WHERE datname = \(database) AND pid <> pg_backend_pid()
                    """
                ).map { try $0.require("s", as: String.self) }
                throw SessionError(description: "fewer than \(count) sessions blocked; sessions: \(sessions)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}

struct SessionError: Error, CustomStringConvertible {
    let description: String
}
