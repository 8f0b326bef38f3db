import Foundation
import Postgres
import Registry

/// The token refresh callback on PostgreSQL.
///
/// Every path takes the installation's row lock first, in a statement of its own, and reads the consent and the
/// stored registration only after it holds it: in READ COMMITTED each statement takes a new snapshot, so whatever a
/// concurrent callback or consent change committed while this one waited is seen (one statement that locked and
/// read together would read from a snapshot taken before the wait, and overwrite a newer token).
extension PostgresRegistrationStore {
    func refresh(_ r: Registration) async throws -> RegistrationWrite {
        do {
            return try await db.transaction { c in
                if let refused = try await Self.lockForRefresh(r, on: c) { return refused }
                return try await Self.refreshInOneStatement(r, on: c)
            }
        } catch let error as RegistryError where error.kind == .alreadyExists {
            // The token is held by another installation: the statement tripped the unique index and rolled back.
            return try await refreshStepByStep(r)
        }
    }

    /// Locks the installation; nil when the refresh may go on, otherwise the answer. `clientTime` is checked
    /// against the database's clock, the one clock every replica shares.
    private static func lockForRefresh(_ r: Registration, on c: PostgresConnection) async throws -> RegistrationWrite? {
        guard
            let row = try await c.query(
                """
                SELECT \(r.clientTime)::timestamptz > now() + \(RefreshOutcome.maxClientTimeAhead)::float8 * interval '1 second'
                    AS ahead
                FROM installations WHERE project_id = \(r.projectID) AND fid = \(r.fid) FOR UPDATE
                """
            ).first
        else { return .installationNotFound }
        return try row.decode("ahead", as: Bool.self) == true ? .clientTimeAhead : nil
    }

    /// Checks consent and the stored `clientTime`, upserts and appends the event, in one statement whose snapshot
    /// is taken after the lock.
    private static func refreshInOneStatement(_ r: Registration, on c: PostgresConnection) async throws
        -> RegistrationWrite
    {
        let rows = try await c.query(
            """
            WITH subject AS (
                SELECT coalesce((SELECT granted FROM consents WHERE project_id = \(r.projectID) AND fid = \(r.fid)
                    AND purpose = \(ConsentService.messaging)), false) AS granted
            ), current AS (
                SELECT token, client_time FROM registrations WHERE project_id = \(r.projectID) AND fid = \(r.fid)
            ), allowed AS (
                SELECT 1 FROM subject WHERE granted AND NOT EXISTS (
                    SELECT 1 FROM current WHERE current.client_time IS NOT NULL AND \(r.clientTime)::timestamptz IS NOT NULL
                    AND \(r.clientTime)::timestamptz < current.client_time)
            ), written AS (
                INSERT INTO registrations (project_id, fid, token, platform, apns_token, apns_environment, state, client_time,
                    created_at, refreshed_at)
                SELECT \(r.projectID), \(r.fid), \(r.token), \(r.platform.rawValue), \(r.apnsToken), \(r.apnsEnvironment?.rawValue),
                    \(r.state.rawValue), \(r.clientTime)::timestamptz, \(r.createdAt), \(r.refreshedAt) FROM allowed
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
            SELECT (SELECT granted FROM subject) AS granted, (SELECT token FROM current) AS previous,
                   (SELECT count(*) FROM written) AS written_count, w.*
            FROM (SELECT 1) AS one LEFT JOIN written w ON true
            """)
        guard let row = rows.first, try row.require("granted", as: Bool.self) else { return .consentOff }
        let previous: String? = try row.decode("previous")
        guard try row.require("written_count", as: Int.self) == 1 else {
            guard
                let current = try await c.query(
                    "SELECT * FROM registrations WHERE project_id = \(r.projectID) AND fid = \(r.fid)"
                ).first
            else { return .installationNotFound }
            return .stored(try decode(current), .ignoredAsOlder)
        }
        // The written row comes back with the statement: no second round trip.
        let outcome: RefreshOutcome = previous == nil ? .created : previous == r.token ? .refreshed : .superseded
        return .stored(try decode(row), outcome)
    }

    /// The rare case of a token moving from another installation, step by step in one transaction.
    private func refreshStepByStep(_ r: Registration) async throws -> RegistrationWrite {
        try await db.transaction { c in
            if let refused = try await Self.lockForRefresh(r, on: c) { return refused }
            guard try await Self.messagingConsent(projectID: r.projectID, fid: r.fid, on: c) else { return .consentOff }
            let current = try await c.query(
                "SELECT * FROM registrations WHERE project_id = \(r.projectID) AND fid = \(r.fid)"
            ).first.map(Self.decode)
            if let current, !RefreshOutcome.accepts(incoming: r.clientTime, stored: current.clientTime) {
                return .stored(current, .ignoredAsOlder)
            }
            let moved = try await c.query(
                "DELETE FROM registrations WHERE project_id = \(r.projectID) AND token = \(r.token) AND fid <> \(r.fid) RETURNING fid"
            )
            var stored = r
            if let current, current.token == r.token { stored.createdAt = current.createdAt }
            guard let row = try await c.query(Self.upsert(stored, keepToken: false)).first else {
                throw RegistryError(.internal, "the registration upsert returned no row")
            }
            let outcome: RefreshOutcome
            if !moved.isEmpty {
                outcome = .moved
            } else if let current {
                outcome = current.token == r.token ? .refreshed : .superseded
            } else {
                outcome = .created
            }
            let event: EventType =
                outcome == .moved ? .registrationMoved : current == nil ? .registrationCreated : .registrationRefreshed
            try await Outbox.append(
                event, projectID: r.projectID, fid: r.fid, payload: Outbox.platform(r.platform), on: c)
            return .stored(try Self.decode(row), outcome)
        }
    }
}
