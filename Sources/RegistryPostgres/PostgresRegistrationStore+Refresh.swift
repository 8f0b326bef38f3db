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
            return try await refreshInOneRoundTrip(r)
        } catch let error as RegistryError where error.kind == .alreadyExists {
            // The token is held by another installation: the statement tripped the unique index and rolled back.
            return try await refreshStepByStep(r)
        }
    }

    /// The whole refresh as one call of `registry_refresh` (migration 11), in autocommit: one round trip and one
    /// transaction. The function takes the steps of ``refreshStepByStep(_:)`` but the move, in the same order, each
    /// read after the lock on a fresh snapshot.
    private func refreshInOneRoundTrip(_ r: Registration) async throws -> RegistrationWrite {
        guard
            let row = try await db.groupCommitted(
                """
                SELECT outcome, previous, (reg).* FROM registry_refresh(\(r.projectID), \(r.fid), \(r.token),
                    \(r.platform.rawValue), \(r.apnsToken), \(r.apnsEnvironment?.rawValue), \(r.state.rawValue),
                    \(r.clientTime)::timestamptz, \(r.createdAt)::timestamptz, \(r.refreshedAt)::timestamptz,
                    \(RefreshOutcome.maxClientTimeAhead)::float8, \(ConsentService.messaging),
                    \(EventType.registrationCreated.rawValue), \(EventType.registrationRefreshed.rawValue),
                    \(Outbox.platform(r.platform).text))
                """, key: r.projectID + "/" + r.fid
            ).first
        else { throw RegistryError(.internal, "registry_refresh returned no row") }
        switch try row.require("outcome") as String {
        case "not_found": return .installationNotFound
        case "ahead": return .clientTimeAhead
        case "consent_off": return .consentOff
        case "older": return .stored(try Self.decode(row), .ignoredAsOlder)
        case "written":
            let previous: String? = try row.decode("previous")
            let outcome: RefreshOutcome = previous == nil ? .created : previous == r.token ? .refreshed : .superseded
            return .stored(try Self.decode(row), outcome)
        case let other: throw RegistryError(.internal, "registry_refresh answered \(other.prefix(32))")
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
