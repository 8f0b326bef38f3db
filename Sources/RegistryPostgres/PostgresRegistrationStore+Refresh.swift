import Foundation
import Postgres
import Registry

/// The token refresh callback on PostgreSQL: one call of `registry_refresh_token` (migration 19), with its audit entry
/// (migration 26), group-committed, so one round trip and one transaction, whatever the case (a token moved from
/// another installation included).
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
    func refresh(_ r: Registration, audit: AuditCompanion<RegistrationWrite.Kind>?) async throws -> RegistrationWrite {
        do {
            return try await refreshOnce(r, audit: audit)
        } catch let error as RegistryError where error.kind == .alreadyExists {
            return try await refreshOnce(r, audit: audit)
        }
    }

    /// The function's call, with the audit entry it appends in the same statement (`registry_refresh_token_audited`,
    /// migration 26): the entry's outcome for each of the function's outcomes is passed as a table, built here from
    /// ``RefreshTokenOutcome``. Without an entry, its fields are NULL and the function appends none.
    private func refreshOnce(_ r: Registration, audit: AuditCompanion<RegistrationWrite.Kind>?) async throws
        -> RegistrationWrite
    {
        let entry = audit?.draft
        let auditOutcomes = audit.map { a in RefreshTokenOutcome.allCases.map { a.outcomes[$0.kind]! } } ?? []
        guard
            let row = try await db.groupCommitted(
                """
                SELECT outcome, previous, moved_from, (reg).* FROM registry_refresh_token_audited(\(r.projectID),
                    \(r.fid), \(r.token), \(r.platform.rawValue), \(r.apnsToken), \(r.apnsEnvironment?.rawValue),
                    \(r.state.rawValue), \(r.clientTime)::timestamptz, \(r.createdAt)::timestamptz,
                    \(r.refreshedAt)::timestamptz, \(RefreshOutcome.maxClientTimeAhead)::float8,
                    \(ConsentService.messaging), \(EventType.registrationCreated.rawValue),
                    \(EventType.registrationRefreshed.rawValue), \(EventType.registrationMoved.rawValue),
                    \(Outbox.platform(r.platform).text), \(entry?.at)::timestamptz, \(entry?.action), \(entry?.target),
                    \(entry.map { ByteA($0.targetDigest) }), \(entry?.subject), \(entry?.actor), \(entry?.requestID),
                    \(RefreshTokenOutcome.names), \(TextArray(auditOutcomes)))
                """, key: r.projectID + "/" + r.fid
            ).first
        else { throw RegistryError(.internal, "registry_refresh_token returned no row") }
        let outcome = try RefreshTokenOutcome(row)
        audit?.markAppended(outcome.kind)
        switch outcome {
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
