import Foundation
import Postgres
import Registry

/// The token refresh callback on PostgreSQL.
extension PostgresRegistrationStore {
    func refresh(_ r: Registration) async throws -> RegistrationWrite {
        do {
            return try await refreshInOneStatement(r)
        } catch let error as RegistryError where error.kind == .alreadyExists {
            return try await refreshStepByStep(r)
        }
    }

    private func refreshInOneStatement(_ r: Registration) async throws -> RegistrationWrite {
        let rows = try await db.query(
            """
            WITH subject AS (
                SELECT i.fid, coalesce(c.granted, false) AS granted FROM installations i
                LEFT JOIN consents c ON c.project_id = i.project_id AND c.fid = i.fid AND c.purpose = \(ConsentService.messaging)
                WHERE i.project_id = \(r.projectID) AND i.fid = \(r.fid) FOR UPDATE OF i
            ), current AS (
                SELECT token, client_time FROM registrations WHERE project_id = \(r.projectID) AND fid = \(r.fid)
            ), allowed AS (
                SELECT 1 FROM subject WHERE granted AND NOT EXISTS (
                    SELECT 1 FROM current WHERE current.client_time IS NOT NULL AND \(r.clientTime)::timestamptz IS NOT NULL
                    AND \(r.clientTime)::timestamptz < current.client_time)
            ), written AS (
                INSERT INTO registrations (project_id, fid, token, platform, apns_token, apns_environment, state, client_time,
                    created_at, refreshed_at)
                SELECT \(r.projectID), \(r.fid), \(r.token), \(r.platform.rawValue), \(r.apnsToken), \(r.apnsEnvironment?.rawValue), \(r.state.rawValue),
                    \(r.clientTime)::timestamptz, \(r.createdAt), \(r.refreshedAt) FROM allowed
                ON CONFLICT (project_id, fid) DO UPDATE SET token = excluded.token, platform = excluded.platform,
                    apns_token = excluded.apns_token, apns_environment = excluded.apns_environment, state = excluded.state,
                    client_time = excluded.client_time, expired_reported = false,
                    created_at = CASE WHEN registrations.token = excluded.token THEN registrations.created_at ELSE excluded.created_at END,
                    refreshed_at = excluded.refreshed_at
                RETURNING *
            ), event AS (
                INSERT INTO event_outbox (project_id, type, fid, data)
                SELECT \(r.projectID), CASE WHEN NOT EXISTS (SELECT 1 FROM current)
                    THEN \(EventType.registrationCreated.rawValue) ELSE \(EventType.registrationRefreshed.rawValue) END,
                    \(r.fid), \(Outbox.platform(r.platform).text) FROM written
            )
            SELECT (SELECT count(*) FROM subject) AS found, (SELECT bool_or(granted) FROM subject) AS granted,
                   (SELECT token FROM current) AS previous, (SELECT count(*) FROM written) AS written_count, w.*
            FROM (SELECT 1) AS one LEFT JOIN written w ON true
            """)
        guard let row = rows.first, try row.require("found", as: Int.self) == 1 else { return .installationNotFound }
        guard try row.decode("granted", as: Bool.self) == true else { return .consentOff }
        let previous: String? = try row.decode("previous")
        guard try row.require("written_count", as: Int.self) == 1 else {
            guard let current = try await find(projectID: r.projectID, fid: r.fid) else { return .installationNotFound }
            return .stored(current, .ignoredAsOlder)
        }
        // The written row comes back with the statement: no second round trip.
        let outcome: RefreshOutcome = previous == nil ? .created : previous == r.token ? .refreshed : .superseded
        return .stored(try Self.decode(row), outcome)
    }

    private func refreshStepByStep(_ r: Registration) async throws -> RegistrationWrite {
        try await db.transaction { c in
            // Lock the installation so concurrent callbacks for it are ordered.
            let subject = try await c.query(
                """
                SELECT coalesce(c.granted, false) AS granted FROM installations i
                LEFT JOIN consents c ON c.project_id = i.project_id AND c.fid = i.fid AND c.purpose = \(ConsentService.messaging)
                WHERE i.project_id = \(r.projectID) AND i.fid = \(r.fid) FOR UPDATE OF i
                """)
            guard let row = subject.first else { return .installationNotFound }
            guard try row.require("granted", as: Bool.self) else { return .consentOff }
            let current = try await c.query(
                "SELECT * FROM registrations WHERE project_id = \(r.projectID) AND fid = \(r.fid)"
            )
            .first.map(Self.decode)
            if let current, !RefreshOutcome.accepts(incoming: r.clientTime, stored: current.clientTime) {
                return .stored(current, .ignoredAsOlder)
            }
            let moved = try await c.query(
                "DELETE FROM registrations WHERE project_id = \(r.projectID) AND token = \(r.token) AND fid <> \(r.fid) RETURNING fid"
            )
            var stored = r
            if let current, current.token == r.token { stored.createdAt = current.createdAt }
            try await c.query(Self.upsert(stored, keepToken: false))
            let outcome: RefreshOutcome
            if !moved.isEmpty {
                outcome = .moved
            } else if let current {
                outcome = current.token == r.token ? .refreshed : .superseded
            } else {
                outcome = .created
            }
            let event: EventType =
                outcome == .moved
                ? .registrationMoved : current == nil ? .registrationCreated : .registrationRefreshed
            try await Outbox.append(
                event, projectID: r.projectID, fid: r.fid, payload: Outbox.platform(r.platform), on: c)
            return .stored(stored, outcome)
        }
    }
}
