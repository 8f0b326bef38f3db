import JSON
import Postgres
import Registry

/// The change feed's outbox: events are appended in the transaction that causes them and numbered later by the
/// relay (``PostgresChangeFeedStore/relay()``), so a rolled-back change never shows up in the feed.
enum Outbox {
    /// Appends one event in `connection`'s transaction.
    static func append(
        _ type: EventType, projectID: String, fid: String, payload: JSONValue? = nil, on connection: PostgresConnection
    ) async throws {
        try await connection.query(
            """
            INSERT INTO event_outbox (project_id, type, fid, data)
            VALUES (\(projectID), \(type.rawValue), \(fid), \(payload?.text))
            """)
    }

    /// The payload of registration events.
    static func platform(_ platform: Platform) -> JSONValue { ["platform": .string(platform.rawValue)] }
}
