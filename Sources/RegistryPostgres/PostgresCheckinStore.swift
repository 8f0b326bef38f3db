import Foundation
import Postgres
import Registry

/// ``CheckinStore`` on PostgreSQL: `checkins` and `gcm_registrations`. Android IDs are unsigned 63-bit numbers,
/// stored as `bigint`.
struct PostgresCheckinStore: CheckinStore {
    let db: Database

    func insert(_ c: StoredCheckin, at: Date) async throws {
        guard let id = Int64(exactly: c.androidID) else {
            throw RegistryError.invalid("android_id", "must be below 2^63")
        }
        try await db.query(
            """
            INSERT INTO checkins (android_id, security_token_hash, project_id, fid, created_at, last_checkin_at)
            VALUES (\(id), \(ByteA(c.securityTokenHash)), \(c.projectID), \(c.fid), \(at), \(at))
            """)
    }

    func enroll(_ c: StoredCheckin, at: Date, limit: Int) async throws -> Bool {
        guard let id = Int64(exactly: c.androidID), let projectID = c.projectID, let fid = c.fid else {
            throw RegistryError.invalid("android_id", "must be below 2^63, for an installation")
        }
        // The installation's row first, in a statement of its own: concurrent enrolments of one installation count
        // one after another, each in a snapshot that sees the ones before it (a single statement's count let them
        // all pass together).
        return try await db.transaction { t in
            try await t.query(
                "SELECT 1 FROM installations WHERE project_id = \(projectID) AND fid = \(fid) FOR NO KEY UPDATE")
            return try await t.query(
                """
                INSERT INTO checkins (android_id, security_token_hash, project_id, fid, created_at, last_checkin_at)
                SELECT \(id), \(ByteA(c.securityTokenHash)), \(projectID), \(fid), \(at), \(at)
                WHERE (SELECT count(*) FROM checkins WHERE project_id = \(projectID) AND fid = \(fid)) < \(limit)
                """
            ).affectedRows == 1
        }
    }

    func checkin(androidID: UInt64) async throws -> StoredCheckin? {
        guard let id = Int64(exactly: androidID),
            let row = try await db.batchedRead("SELECT * FROM checkins WHERE android_id = \(id)").first
        else { return nil }
        return StoredCheckin(
            androidID: androidID, securityTokenHash: try row.require("security_token_hash", as: ByteA.self).bytes,
            projectID: try row.decode("project_id"), fid: try row.decode("fid"))
    }

    func touch(androidID: UInt64, at: Date) async throws {
        guard let id = Int64(exactly: androidID) else { return }
        try await db.query("UPDATE checkins SET last_checkin_at = \(at) WHERE android_id = \(id)")
    }

    func bind(androidID: UInt64, projectID: String, fid: String) async throws -> Bool {
        guard let id = Int64(exactly: androidID) else { return false }
        return try await db.query(
            """
            UPDATE checkins SET project_id = \(projectID), fid = \(fid)
            WHERE android_id = \(id) AND (fid IS NULL OR (project_id = \(projectID) AND fid = \(fid)))
            """
        ).affectedRows == 1
    }

    func rebind(androidID: UInt64, projectID: String, fid: String, from previousFID: String) async throws -> Bool {
        guard let id = Int64(exactly: androidID) else { return false }
        return try await db.query(
            """
            UPDATE checkins SET fid = \(fid)
            WHERE android_id = \(id) AND project_id = \(projectID) AND fid = \(previousFID)
            """
        ).affectedRows == 1
    }

    func gcmToken(androidID: UInt64, app: String, subtype: String, candidate: String, at: Date, limit: Int)
        async throws -> String
    {
        guard let id = Int64(exactly: androidID) else { throw RegistryError(.notFound, "unknown check-in") }
        return try await db.transaction { c in
            // Under the check-in's row lock, so concurrent registrations of one check-in count one after another; the
            // use counts as seen, so a purge waiting on the lock finds the check-in in use and leaves it.
            guard
                try await c.query(
                    "UPDATE checkins SET last_checkin_at = greatest(last_checkin_at, \(at)) WHERE android_id = \(id)"
                ).affectedRows == 1
            else { throw RegistryError(.unauthenticated, "unknown check-in credentials") }
            if let existing: String = try await c.query(
                """
                SELECT token FROM gcm_registrations WHERE android_id = \(id) AND app = \(app) AND subtype = \(subtype)
                """
            ).first?.require("token") {
                return existing
            }
            try await c.requireRoom(
                "SELECT count(*)::int AS n FROM gcm_registrations WHERE android_id = \(id)", limit: limit,
                field: "subtype", "a check-in may hold at most \(limit) registrations")
            try await c.query(
                """
                INSERT INTO gcm_registrations (android_id, app, subtype, token, created_at)
                VALUES (\(id), \(app), \(subtype), \(candidate), \(at))
                """)
            return candidate
        }
    }

    func purgeUnused(before cutoff: Date, limit: Int) async throws -> Int {
        try await db.query(
            """
            DELETE FROM checkins d WHERE d.android_id IN (
                SELECT c.android_id FROM checkins c
                WHERE c.fid IS NULL AND c.last_checkin_at < \(cutoff)
                  AND NOT EXISTS (SELECT 1 FROM gcm_registrations g WHERE g.android_id = c.android_id)
                ORDER BY c.last_checkin_at LIMIT \(limit)
            )
            -- Again on the row itself: re-checked on its newest version if a bind or a registration committed while
            -- this waited on its lock (the subquery's snapshot would not see them).
            AND d.fid IS NULL AND d.last_checkin_at < \(cutoff)
            """
        ).affectedRows
    }

    func deleteGCMToken(androidID: UInt64, app: String, subtype: String) async throws -> String? {
        guard let id = Int64(exactly: androidID) else { return nil }
        return try await db.query(
            """
            DELETE FROM gcm_registrations WHERE android_id = \(id) AND app = \(app) AND subtype = \(subtype) RETURNING token
            """
        ).first?.require("token")
    }
}
