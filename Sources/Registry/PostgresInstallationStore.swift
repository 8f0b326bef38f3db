import Crypto
import Foundation
import Postgres

/// ``InstallationStore`` on PostgreSQL.
public struct PostgresInstallationStore: InstallationStore {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// One statement, so one round trip and one implicit transaction: the retired-FID check, the installation,
    /// its initial consent and the ledger entry (foreign keys are checked at the end of the statement).
    public func create(_ i: Installation, fidHMAC: [UInt8], initialConsent: Bool) async throws -> Bool {
        let rows = try await pool.query(
            """
            WITH retired AS (
                SELECT 1 FROM retired_fids WHERE project_id = \(i.projectID) AND fid_hmac = \(ByteA(fidHMAC))
            ), created AS (
                INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, sdk_version, created_at, last_seen_at)
                SELECT \(i.projectID), \(i.fid), \(i.appID), \(ByteA(i.refreshTokenHash)), \(i.sdkVersion), \(i.createdAt), \(i.lastSeenAt)
                WHERE NOT EXISTS (SELECT 1 FROM retired)
                ON CONFLICT DO NOTHING
                RETURNING project_id, fid, created_at
            ), consent AS (
                INSERT INTO consents (project_id, fid, purpose, granted, source, actor, updated_at)
                SELECT project_id, fid, 'messaging', \(initialConsent), 'app-default', 'default', created_at FROM created
            ), ledger AS (
                INSERT INTO consent_events (project_id, fid, purpose, granted, previous, actor, source, recorded_at)
                SELECT project_id, fid, 'messaging', \(initialConsent), NULL, 'default', 'app-default', created_at FROM created
            ), event AS (
                INSERT INTO event_outbox (project_id, type, fid) SELECT project_id, 'installation.created', fid FROM created
            )
            SELECT count(*) AS created FROM created
            """)
        return try rows.first?.require("created", as: Int.self) == 1
    }

    public func find(projectID: String, fid: String) async throws -> Installation? {
        guard
            let row = try await pool.query(
                "SELECT * FROM installations WHERE project_id = \(projectID) AND fid = \(fid)"
            ).first
        else { return nil }
        return Installation(
            projectID: try row.require("project_id"), fid: try row.require("fid"), appID: try row.require("app_id"),
            refreshTokenHash: try row.require("refresh_token_hash", as: ByteA.self).bytes,
            sdkVersion: try row.decode("sdk_version"), createdAt: try row.require("created_at"),
            lastSeenAt: try row.require("last_seen_at"))
    }

    public func touch(projectID: String, fid: String, at: Date) async throws {
        try await pool.query(
            "UPDATE installations SET last_seen_at = \(at) WHERE project_id = \(projectID) AND fid = \(fid) AND last_seen_at < \(at)"
        )
    }

    /// The deletion, in one transaction: the installation and everything keyed by it leave the live tables, the FID
    /// is retired (as a keyed hash), a deletion record with its 180-day deadline is written, one delivery per
    /// linked service is queued, and an event is appended.
    public func delete(projectID: String, fid: String, fidHMAC: [UInt8], at: Date, reason: DeletionReason) async throws
        -> Bool
    {
        try await pool.withTransaction { c in
            let deleted = try await c.query(
                "DELETE FROM installations WHERE project_id = \(projectID) AND fid = \(fid)")
            guard deleted.affectedRows == 1 else { return false }
            try await c.query("DELETE FROM consent_events WHERE project_id = \(projectID) AND fid = \(fid)")
            try await c.query(
                """
                INSERT INTO retired_fids (project_id, fid_hmac, retired_at) VALUES (\(projectID), \(ByteA(fidHMAC)), \(at))
                ON CONFLICT DO NOTHING
                """)
            let deadline = at.addingTimeInterval(DeletionReason.deadline)
            try await c.query(
                """
                WITH deletion AS (
                    INSERT INTO deletions (project_id, fid, fid_hmac, reason, requested_at, deadline)
                    VALUES (\(projectID), \(fid), \(ByteA(fidHMAC)), \(reason.rawValue), \(at), \(deadline))
                    ON CONFLICT (project_id, fid) DO UPDATE SET requested_at = deletions.requested_at
                    RETURNING id
                ), queued AS (
                    INSERT INTO deletion_deliveries (deletion_id, service, delivery_id, next_attempt_at)
                    SELECT deletion.id, ls.name, md5(random()::text || clock_timestamp()::text || ls.name), \(at)
                    FROM deletion, linked_services ls WHERE ls.project_id = \(projectID)
                    ON CONFLICT DO NOTHING
                    RETURNING deletion_id
                )
                UPDATE deletions SET completed_at = \(at)
                WHERE id = (SELECT id FROM deletion) AND NOT EXISTS (SELECT 1 FROM queued)
                """)
            try await c.query(
                """
                INSERT INTO event_outbox (project_id, type, fid, data) VALUES (\(projectID), 'installation.deleted', \(fid),
                    \("{\"reason\":\"\(reason.rawValue)\"}"))
                """)
            return true
        }
    }

    public func isRetired(projectID: String, fidHMAC: [UInt8]) async throws -> Bool {
        !(try await pool.query(
            "SELECT 1 FROM retired_fids WHERE project_id = \(projectID) AND fid_hmac = \(ByteA(fidHMAC))"
        ).isEmpty)
    }
}

/// Secrets the service generates for itself and keeps in `server_secrets`, shared by every replica.
public enum ServerSecrets {
    /// The named secret, created (32 random bytes) by whichever replica asks first.
    public static func load(_ name: String, pool: PostgresPool) async throws -> [UInt8] {
        let candidate = ByteA(try SecureRandom.bytes(32))
        try await pool.query(
            "INSERT INTO server_secrets (name, secret) VALUES (\(name), \(candidate)) ON CONFLICT DO NOTHING")
        guard let row = try await pool.query("SELECT secret FROM server_secrets WHERE name = \(name)").first else {
            throw PostgresError(.server, message: "server secret \(name) missing")
        }
        return try row.require("secret", as: ByteA.self).bytes
    }
}
