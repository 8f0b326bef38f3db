import Foundation
import JSON
import Postgres
import Registry

/// ``ErasureStore`` on PostgreSQL: `erasures` and `erasure_members` (migration 23), over the deletion records.
struct PostgresErasureStore: ErasureStore {
    let db: Database

    /// Under the user's lock: every installation bound to the user is deleted as an installation deletion is (reason
    /// `erasure`), each recorded as a member; the user's clear ID leaves the binding history and the feed.
    func erase(_ r: ErasureRequest) async throws -> ErasureRecord {
        try await db.transaction { c in
            try await PostgresUserStore.lockUsers(hashes: [r.userHash], on: c)
            // Every installation whose history names the person (bound now, or left), read before any goes: their feed
            // events are the ones that can name the person too.
            let named = try await c.query(
                """
                SELECT DISTINCT fid FROM user_binding_history WHERE project_id = \(r.projectID)
                  AND (user_hmac = \(ByteA(r.userHash)) OR previous_user_hmac = \(ByteA(r.userHash)))
                """
            ).map { try $0.require("fid", as: String.self) }
            try await c.query(
                """
                INSERT INTO erasures (project_id, erasure_id, user_hmac, requested_at, deadline)
                VALUES (\(r.projectID), \(r.erasureID), \(ByteA(r.userHash)), \(r.requestedAt), \(r.deadline))
                """)
            let fids = try await c.query(
                """
                SELECT fid FROM user_bindings WHERE project_id = \(r.projectID) AND user_id = \(r.userID)
                ORDER BY fid COLLATE "C"
                """
            ).map { try $0.require("fid", as: String.self) }
            for fid in fids {
                let hash = r.fidHash(fid)
                // Deleted by another request while this erasure waited for its row: that deletion's record is the
                // person's too, so the person's receipt waits for its services as well.
                var deleted = try await PostgresInstallationStore.delete(
                    DeletionRequest(
                        projectID: r.projectID, fid: fid, fidHash: hash, reason: .erasure,
                        requestedAt: r.requestedAt, deadline: r.deadline, idleBefore: nil,
                        traceparent: r.traceparent), on: c)
                if deleted == nil {
                    deleted = try await c.query(
                        "SELECT id FROM deletions WHERE project_id = \(r.projectID) AND fid = \(fid)"
                    ).first?.require("id", as: Int64.self)
                }
                guard let id = deleted else { continue }
                try await c.query(
                    """
                    INSERT INTO erasure_members (project_id, erasure_id, deletion_id, fid_hmac)
                    VALUES (\(r.projectID), \(r.erasureID), \(id), \(ByteA(hash)))
                    """)
            }
            let hash = ByteA(r.userHash)
            try await c.query(
                """
                UPDATE user_binding_history SET user_id = NULL
                WHERE project_id = \(r.projectID) AND user_hmac = \(hash) AND user_id IS NOT NULL
                """)
            try await c.query(
                """
                UPDATE user_binding_history SET previous_user_id = NULL
                WHERE project_id = \(r.projectID) AND previous_user_hmac = \(hash) AND previous_user_id IS NOT NULL
                """)
            // The feed's user events of installations that stay (a device the user left) name the user too. The
            // outbox first: an event the relay moves meanwhile is in `events` by the time that is read.
            let types = TextArray([EventType.userBound, .userMoved, .userUnbound].map(\.rawValue))
            for table in ["event_outbox", "events"] where !named.isEmpty {
                try await c.query(
                    PostgresQuery(
                        unsafeSQL: """
                            DELETE FROM \(table) WHERE project_id = $1 AND fid = ANY($4::text[]) AND type = ANY($2::text[])
                              AND (data::jsonb ->> 'userId' = $3 OR data::jsonb ->> 'previousUserId' = $3)
                            """, binds: [r.projectID, types.postgresText, r.userID, TextArray(named).postgresText]))
            }
            guard let record = try await Self.erasure(projectID: r.projectID, id: r.erasureID, on: c)
            else { throw RegistryError(.internal, "the erasure just recorded is missing") }
            return record
        }
    }

    func erasure(projectID: String, id: String) async throws -> ErasureRecord? {
        try await db.transaction { c in
            try await Self.erasure(projectID: projectID, id: id, on: c)
        }
    }

    func erasures(projectID: String, userHash: [UInt8]) async throws -> [ErasureRecord] {
        try await db.transaction { c in
            var records: [ErasureRecord] = []
            for row in try await c.query(
                """
                SELECT erasure_id FROM erasures WHERE project_id = \(projectID) AND user_hmac = \(ByteA(userHash))
                ORDER BY requested_at, erasure_id
                """)
            {
                if let record = try await Self.erasure(
                    projectID: projectID, id: try row.require("erasure_id"), on: c)
                {
                    records.append(record)
                }
            }
            return records
        }
    }

    static func erasure(projectID: String, id: String, on c: PostgresConnection) async throws -> ErasureRecord? {
        guard
            let head = try await c.query(
                "SELECT * FROM erasures WHERE project_id = \(projectID) AND erasure_id = \(id)"
            ).first
        else { return nil }
        var members: [ErasureMember] = []
        for row in try await c.query(
            """
            SELECT m.deletion_id, m.fid_hmac, m.purged_state, m.completed_at, m.services
            FROM erasure_members m WHERE m.project_id = \(projectID) AND m.erasure_id = \(id) ORDER BY m.fid_hmac
            """)
        {
            let deletionID: Int64 = try row.require("deletion_id")
            var record: DeletionRecord?
            if let deletion = try await c.query("SELECT * FROM deletions WHERE id = \(deletionID)").first {
                record = try await PostgresDeletionStore.live(deletion, query: c.query)
            } else if let overdue = try await c.query(
                "SELECT * FROM overdue_deletions WHERE deletion_id = \(deletionID)"
            ).first {
                record = try PostgresDeletionStore.purged(overdue)
            }
            members.append(
                ErasureMember(
                    deletionID: deletionID, fidHash: try row.require("fid_hmac", as: ByteA.self).bytes,
                    deletion: record, purgedState: try row.decode("purged_state", as: ReceiptState.self),
                    completedAt: try row.decode("completed_at"),
                    purgedServices: Self.services(try row.decode("services"))))
        }
        return ErasureRecord(
            id: id, userHash: try head.require("user_hmac", as: ByteA.self).bytes,
            requestedAt: try head.require("requested_at"), deadline: try head.require("deadline"), members: members)
    }

    static func seconds(_ value: JSONValue?) -> Double? {
        guard case let .number(text) = value else { return nil }
        return Double(text)
    }

    /// The services of a purged member, as the purge copied them (``PostgresMaintenanceStore/purge``).
    static func services(_ text: String?) -> [DeliveryStatus] {
        guard let text, let value = try? JSONParser.parse(Array(text.utf8)), let items = value.arrayValue else {
            return []
        }
        return items.compactMap { item in
            guard let service = item["service"]?.stringValue,
                let state = item["state"]?.stringValue.flatMap(DeliveryState.init(rawValue:))
            else { return nil }
            return DeliveryStatus(
                service: service, state: state, attempts: Int(item["attempts"]?.int64Value ?? 0), lastError: nil,
                acknowledgedAt: Self.seconds(item["acknowledgedAt"]).map(Date.init(timeIntervalSince1970:)))
        }
    }
}
