import Foundation
import Postgres
import Registry

/// The token refresh callback on PostgreSQL: one call of `registry_refresh_token` (migration 19), in autocommit, so
/// one round trip and one transaction, whatever the case (a token moved from another installation included).
///
/// The function takes the installation's row lock first, in a statement of its own, and reads the consent and the
/// stored registration only after it holds it: each statement of a VOLATILE PL/pgSQL function takes a new snapshot in
/// READ COMMITTED, so whatever a concurrent callback or consent change committed while this one waited is seen (one
/// statement that locked and read together would read from a snapshot taken before the wait, and overwrite a newer
/// token).
extension PostgresRegistrationStore {
    ///
    /// One race remains for the database to decide: another installation writing the same token, not yet committed
    /// when this call looked for its holder. Its commit then trips the unique index on `(project_id, token)` here; the
    /// call runs once more, a new statement that sees the holder and takes the token from it, by the same rule.
    func refresh(_ r: Registration) async throws -> RegistrationWrite {
        do {
            return try await refreshOnce(r)
        } catch let error as RegistryError where error.kind == .alreadyExists {
            return try await refreshOnce(r)
        }
    }

    private func refreshOnce(_ r: Registration) async throws -> RegistrationWrite {
        guard
            let row = try await db.groupCommitted(
                """
                SELECT outcome, previous, moved_from, (reg).* FROM registry_refresh_token(\(r.projectID), \(r.fid),
                    \(r.token), \(r.platform.rawValue), \(r.apnsToken), \(r.apnsEnvironment?.rawValue), \(r.state.rawValue),
                    \(r.clientTime)::timestamptz, \(r.createdAt)::timestamptz, \(r.refreshedAt)::timestamptz,
                    \(RefreshOutcome.maxClientTimeAhead)::float8, \(ConsentService.messaging),
                    \(EventType.registrationCreated.rawValue), \(EventType.registrationRefreshed.rawValue),
                    \(EventType.registrationMoved.rawValue), \(Outbox.platform(r.platform).text))
                """, key: r.projectID + "/" + r.fid
            ).first
        else { throw RegistryError(.internal, "registry_refresh_token returned no row") }
        switch try RefreshTokenOutcome(row) {
        case .notFound: return .installationNotFound
        case .ahead: return .clientTimeAhead
        case .consentOff: return .consentOff
        case .older: return .stored(try Self.decode(row), .ignoredAsOlder)
        case .written:
            let moved: String? = try row.decode("moved_from")
            return .stored(
                try Self.decode(row),
                RefreshOutcome.of(previous: try row.decode("previous"), incoming: r.token, movedFromAnother: moved != nil))
        }
    }
}
