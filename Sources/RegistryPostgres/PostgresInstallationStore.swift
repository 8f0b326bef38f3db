import Crypto
import Foundation
import Postgres
import Registry

/// ``InstallationStore`` on PostgreSQL.
struct PostgresInstallationStore: InstallationStore {
    let db: Database

    /// One statement, so one round trip and one implicit transaction: the retired-FID check, the installation,
    /// its initial consent, the ledger entry and the feed event (foreign keys are checked at the end of the
    /// statement), and the re-check of the retirement after the insert (`registry_assert_fid_live`, migration 5).
    func create(_ i: Installation, fidHash: [UInt8], initialConsent: Bool) async throws -> Bool {
        do {
            return try await db.groupCommitted(
                Self.creation(i, fidHash: fidHash, initialConsent: initialConsent), key: i.projectID + "/" + i.fid
            ).first?
            .require("created", as: Int.self) == 1
        } catch let error as RegistryError where error.kind == .alreadyExists {
            return false  // retired while this create waited on the deleting transaction
        }
    }

    /// The creation statement; it answers one row, `created` = 1 when the installation was made.
    static func creation(_ i: Installation, fidHash: [UInt8], initialConsent: Bool) -> PostgresQuery {
        """
        WITH retired AS (
            SELECT 1 FROM retired_fids WHERE project_id = \(i.projectID) AND fid_hmac = \(ByteA(fidHash))
        ), created AS (
            INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, sdk_version, created_at, last_seen_at)
            SELECT \(i.projectID), \(i.fid), \(i.appID), \(ByteA(i.refreshTokenHash)), \(i.sdkVersion), \(i.createdAt), \(i.lastSeenAt)
            WHERE NOT EXISTS (SELECT 1 FROM retired)
            ON CONFLICT DO NOTHING
            RETURNING project_id, fid, created_at
        ), consent AS (
            INSERT INTO consents (project_id, fid, purpose, granted, source, actor, updated_at)
            SELECT project_id, fid, \(ConsentService.messaging), \(initialConsent), 'app-default',
                \(ConsentActor.default.rawValue), created_at FROM created
        ), ledger AS (
            INSERT INTO consent_events (project_id, fid, purpose, granted, previous, actor, source, recorded_at)
            SELECT project_id, fid, \(ConsentService.messaging), \(initialConsent), NULL,
                \(ConsentActor.default.rawValue), 'app-default', created_at FROM created
        ), event AS (
            INSERT INTO event_outbox (project_id, type, fid)
            SELECT project_id, \(EventType.installationCreated.rawValue), fid FROM created
        )
        SELECT count(*) AS created FROM created WHERE registry_assert_fid_live(project_id, \(ByteA(fidHash)))
        """
    }

    func find(projectID: String, fid: String) async throws -> Installation? {
        guard
            let row = try await db.batchedRead(
                "SELECT * FROM installations WHERE project_id = \(projectID) AND fid = \(fid)"
            ).first
        else { return nil }
        return try Self.decode(row)
    }

    static func decode(_ row: PostgresRow) throws -> Installation {
        Installation(
            projectID: try row.require("project_id"), fid: try row.require("fid"), appID: try row.require("app_id"),
            refreshTokenHash: try row.require("refresh_token_hash", as: ByteA.self).bytes,
            sdkVersion: try row.decode("sdk_version"), createdAt: try row.require("created_at"),
            lastSeenAt: try row.require("last_seen_at"))
    }

    func touch(projectID: String, fid: String, at: Date, sdkVersion: String?) async throws {
        try await db.query(
            """
            UPDATE installations SET last_seen_at = GREATEST(last_seen_at, \(at)),
            sdk_version = COALESCE(\(sdkVersion)::text, sdk_version)
            WHERE project_id = \(projectID) AND fid = \(fid)
            AND (last_seen_at < \(at) OR sdk_version IS DISTINCT FROM COALESCE(\(sdkVersion)::text, sdk_version))
            """)
    }

    /// The deletion, in one transaction: the installation and everything keyed by it leave the live tables, the FID
    /// is retired (as a keyed hash), a deletion record with its 180-day deadline is written, one delivery per
    /// linked service is queued, and an event is appended. With no linked service the record is complete at once.
    func delete(_ d: DeletionRequest) async throws -> Bool {
        try await db.transaction { c in try await Self.delete(d, on: c) != nil }
    }

    /// The deletion's statements in `c`'s transaction (a person's erasure runs one per installation in its own).
    ///
    /// - Returns: the deletion record's id; nil when there was no such installation (or it was not idle).
    static func delete(_ d: DeletionRequest, on c: PostgresConnection) async throws -> Int64? {
        if let idleBefore = d.idleBefore {
            // Expiry: an installation whose row another transaction holds is in use, not idle; it is passed over this
            // round rather than waited for (a tenant holding its own row must not hold the job every tenant shares).
            let idle = try await c.query(
                """
                SELECT 1 FROM installations WHERE project_id = \(d.projectID) AND fid = \(d.fid)
                  AND last_seen_at < \(idleBefore) FOR UPDATE SKIP LOCKED
                """)
            guard !idle.isEmpty else { return nil }
        }
        let deleted = try await c.query(
            """
            DELETE FROM installations WHERE project_id = \(d.projectID) AND fid = \(d.fid)
            AND (\(d.idleBefore)::timestamptz IS NULL OR last_seen_at < \(d.idleBefore)::timestamptz)
            """)
        guard deleted.affectedRows == 1 else { return nil }
        try await c.query("DELETE FROM consent_events WHERE project_id = \(d.projectID) AND fid = \(d.fid)")
        try await c.query(
            """
            INSERT INTO retired_fids (project_id, fid_hmac, retired_at) VALUES (\(d.projectID), \(ByteA(d.fidHash)), \(d.requestedAt))
            ON CONFLICT DO NOTHING
            """)
        // The project's linked services are held (`held`: a key-share lock) until the deletion commits, and the
        // deliveries are made for exactly the services held: a removal of one waits for the deletion, then abandons
        // the delivery made here; a removal already under way is waited for, and its service gets none. Without the
        // lock a removal that committed between the read and the commit could not see the delivery, which stayed
        // pending for a service that no longer existed, for ever. The completion is decided in the insert itself: a
        // later statement of the same CTE could not see the row the insert made.
        let record = try await c.query(
            """
            WITH held AS (
                SELECT project_id, name FROM linked_services WHERE project_id = \(d.projectID) FOR KEY SHARE
            ), deletion AS (
                INSERT INTO deletions (project_id, fid, fid_hmac, reason, requested_at, deadline, traceparent, completed_at)
                VALUES (\(d.projectID), \(d.fid), \(ByteA(d.fidHash)), \(d.reason.rawValue), \(d.requestedAt), \(d.deadline),
                    \(d.traceparent),
                    CASE WHEN EXISTS (SELECT 1 FROM held) THEN NULL ELSE \(d.requestedAt)::timestamptz END)
                ON CONFLICT (project_id, fid) DO UPDATE SET requested_at = deletions.requested_at
                RETURNING id
            ), deliveries AS (
                INSERT INTO deletion_deliveries (deletion_id, project_id, service, delivery_id, next_attempt_at)
                SELECT deletion.id, held.project_id, held.name, gen_random_uuid()::text, \(d.requestedAt)
                FROM deletion, held
                ON CONFLICT DO NOTHING
            )
            SELECT id FROM deletion
            """)
        try await Outbox.append(
            .installationDeleted, projectID: d.projectID, fid: d.fid,
            payload: ["reason": .string(d.reason.rawValue)],
            on: c)
        return try record.first?.require("id")
    }

    func existing(projectID: String, fids: [String]) async throws -> Set<String> {
        guard !fids.isEmpty else { return [] }
        return Set(
            try await db.query(
                """
                SELECT fid FROM installations WHERE project_id = \(projectID) AND fid = ANY(\(TextArray(fids))::text[])
                """
            ).map { try $0.require("fid", as: String.self) })
    }

    func isRetired(projectID: String, fidHash: [UInt8]) async throws -> Bool {
        !(try await db.query(
            "SELECT 1 FROM retired_fids WHERE project_id = \(projectID) AND fid_hmac = \(ByteA(fidHash))"
        ).isEmpty)
    }

    func idle(before cutoff: Date, limit: Int) async throws -> [(projectID: String, fid: String)] {
        try await db.query(
            """
            SELECT project_id, fid FROM installations WHERE last_seen_at < \(cutoff) ORDER BY last_seen_at LIMIT \(limit)
            """
        ).map { (try $0.require("project_id"), try $0.require("fid")) }
    }
}

/// ``SecretStore`` on PostgreSQL: `server_secrets`, shared by every replica.
struct PostgresSecretStore: SecretStore {
    let db: Database

    static func context(_ name: String) -> String { "server_secrets:" + name }

    /// Created sealed by the first replica that asks; every later one reads the same.
    func secret(named name: String) async throws -> [UInt8] {
        let sealed = try db.box.seal(try SecureRandom.bytes(32), context: Self.context(name))
        try await db.query(
            "INSERT INTO server_secrets (name, secret) VALUES (\(name), \(ByteA(Array(sealed.utf8)))) ON CONFLICT DO NOTHING"
        )
        guard let row = try await db.query("SELECT secret FROM server_secrets WHERE name = \(name)").first else {
            throw RegistryError(.internal, "server secret \(name) missing")
        }
        let stored = String(decoding: try row.require("secret", as: ByteA.self).bytes, as: UTF8.self)
        guard let bytes = try? db.box.open(stored, context: Self.context(name)) else {
            throw RegistryError(
                .internal,
                "server secret \(name) does not open with this SECRETS_KEY; start with the key it was sealed with")
        }
        return bytes
    }
}
