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
    func refresh(_ r: Registration, audit: AuditCompanion<RegistrationWrite.Kind>?) async throws -> RegistrationWrite {
        do {
            return try await refreshOnce(r, audit: audit)
        } catch let error as RegistryError where error.kind == .alreadyExists {
            return try await refreshOnce(r, audit: audit)
        }
    }

    /// The function's call, and the audit entry's insert beside it in the same statement (so in its transaction):
    /// the entry's outcome is looked up from the function's, through arrays made from ``RefreshTokenOutcome`` here.
    /// Without an entry, the insert's `WHERE` is false and it writes nothing.
    private func refreshOnce(_ r: Registration, audit: AuditCompanion<RegistrationWrite.Kind>?) async throws
        -> RegistrationWrite
    {
        let entry = audit?.draft
        let outcomes = RefreshTokenOutcome.allCases
        let auditOutcomes = audit.map { a in outcomes.map { a.outcomes[$0.kind]! } } ?? []
        guard
            let row = try await db.groupCommitted(
                """
                WITH r AS MATERIALIZED (
                    SELECT outcome, previous, moved_from, (reg).* FROM registry_refresh_token(\(r.projectID), \(r.fid),
                        \(r.token), \(r.platform.rawValue), \(r.apnsToken), \(r.apnsEnvironment?.rawValue),
                        \(r.state.rawValue), \(r.clientTime)::timestamptz, \(r.createdAt)::timestamptz,
                        \(r.refreshedAt)::timestamptz, \(RefreshOutcome.maxClientTimeAhead)::float8,
                        \(ConsentService.messaging), \(EventType.registrationCreated.rawValue),
                        \(EventType.registrationRefreshed.rawValue), \(EventType.registrationMoved.rawValue),
                        \(Outbox.platform(r.platform).text))
                ), entry AS (
                    INSERT INTO audit_pending (project_id, at, action, target, target_digest, subject, actor, request_id,
                        outcome)
                    SELECT \(entry?.projectID)::text, \(entry?.at)::timestamptz, \(entry?.action)::text,
                        \(entry?.target)::text, \(entry.map { ByteA($0.targetDigest) })::bytea, \(entry?.subject)::boolean,
                        \(entry?.actor)::text, \(entry?.requestID)::text,
                        (SELECT o FROM unnest(\(TextArray(outcomes.map(\.rawValue)))::text[],
                            \(TextArray(auditOutcomes))::text[]) AS m(k, o) WHERE m.k = r.outcome)
                    FROM r WHERE \(entry != nil)::boolean
                )
                SELECT * FROM r
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
