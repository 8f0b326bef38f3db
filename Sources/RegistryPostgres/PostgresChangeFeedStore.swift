import Foundation
import JSON
import Postgres
import Registry

/// ``ChangeFeedStore`` on PostgreSQL: `event_outbox` (appended by the transactions that cause events) relayed into
/// the numbered `events` table.
struct PostgresChangeFeedStore: ChangeFeedStore {
    let db: Database
    static let relayLock: Int64 = 0x7472_7265_6c61_7901

    func events(projectID: String, after cursor: Int64, limit: Int) async throws -> [FeedEvent] {
        try await db.query(
            """
            SELECT seq, type, fid, data, created_at FROM events WHERE project_id = \(projectID) AND seq > \(cursor)
            ORDER BY seq LIMIT \(limit)
            """
        ).map(Self.event)
    }

    /// An event from its row (`seq, type, fid, data, created_at`).
    static func event(_ row: PostgresRow) throws -> FeedEvent {
        FeedEvent(
            sequence: try row.require("seq"), type: try row.require("type", as: EventType.self),
            fid: try row.require("fid"),
            data: try row.decode("data", as: String.self).flatMap { try? JSONParser.parse(Array($0.utf8)) },
            time: try row.require("created_at"))
    }

    func relay(limit: Int) async throws -> Int {
        try await db.transaction { c in
            guard
                try await c.query("SELECT pg_try_advisory_xact_lock(\(Self.relayLock)) AS ok").first?.require(
                    "ok", as: Bool.self) == true
            else { return 0 }
            // Every transaction with an id below xmin has finished: its events can no longer appear later.
            guard
                let xmin: String = try await c.query(
                    "SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS x"
                ).first?.require("x")
            else { return 0 }
            let moved = try await c.query(
                """
                WITH moved AS (
                    DELETE FROM event_outbox WHERE id = ANY(ARRAY(
                        SELECT id FROM event_outbox WHERE tx < \(xmin)::xid8 ORDER BY id LIMIT \(limit)))
                    RETURNING *)
                INSERT INTO events (project_id, type, fid, data, created_at)
                SELECT project_id, type, fid, data, created_at FROM moved ORDER BY id
                """)
            return moved.affectedRows
        }
    }
}
