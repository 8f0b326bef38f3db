import Foundation
import Postgres
import Registry

/// ``RegistrationStore`` on PostgreSQL.
struct PostgresRegistrationStore: RegistrationStore {
    let db: Database

    /// Locks the installation first, then (in a statement whose snapshot is taken after the lock, so a consent
    /// withdrawal committed meanwhile is seen) checks consent and upserts.
    /// One statement (`registry_register`, migration 13): the installation's lock, then consent and the stored
    /// registration read after it, the upsert (an existing registration keeps its token and creation time) and the
    /// feed event. Committed with concurrent writes of the same loop (group commit), in the installation's order.
    func register(_ r: Registration) async throws -> RegistrationWrite {
        guard
            let row = try await db.groupCommitted(
                """
                SELECT outcome, existed, (reg).* FROM registry_register(\(r.projectID), \(r.fid), \(r.token),
                    \(r.platform.rawValue), \(r.apnsToken), \(r.apnsEnvironment?.rawValue), \(r.bundleID), \(r.appVersion),
                    \(r.sdkVersion), \(r.web?.endpoint), \(r.web?.auth), \(r.web?.p256dh), \(r.web?.applicationPubKey),
                    \(r.web?.origin), \(r.state.rawValue), \(r.clientTime)::timestamptz, \(r.createdAt)::timestamptz,
                    \(r.refreshedAt)::timestamptz, \(ConsentService.messaging), \(EventType.registrationCreated.rawValue),
                    \(EventType.registrationRefreshed.rawValue), \(Outbox.platform(r.platform).text))
                """, key: r.projectID + "/" + r.fid
            ).first
        else { throw RegistryError(.internal, "registry_register returned no row") }
        switch try RegisterOutcome(row) {
        case .notFound: return .installationNotFound
        case .consentOff: return .consentOff
        case .written:
            return .stored(try Self.decode(row), try row.require("existed", as: Bool.self) ? .refreshed : .created)
        }
    }

    /// Inserts or updates the installation's registration. With `keepToken` an existing registration keeps its
    /// token (the client routes); otherwise the token is replaced (the refresh callback). Either way the creation
    /// time stays while the token does.
    static func upsert(_ r: Registration, keepToken: Bool) -> PostgresQuery {
        let token = keepToken ? "registrations.token" : "excluded.token"
        return """
            INSERT INTO registrations (project_id, fid, token, platform, apns_token, apns_environment, bundle_id, app_version,
                sdk_version, web_endpoint, web_auth, web_p256dh, web_app_key, web_origin, state, client_time, created_at, refreshed_at)
            VALUES (\(r.projectID), \(r.fid), \(r.token), \(r.platform.rawValue), \(r.apnsToken), \(r.apnsEnvironment?.rawValue),
                \(r.bundleID), \(r.appVersion), \(r.sdkVersion), \(r.web?.endpoint), \(r.web?.auth), \(r.web?.p256dh),
                \(r.web?.applicationPubKey), \(r.web?.origin), \(r.state.rawValue), \(r.clientTime), \(r.createdAt), \(r.refreshedAt))
            ON CONFLICT (project_id, fid) DO UPDATE SET token = \(unsafeSQL: token), platform = excluded.platform,
                apns_token = excluded.apns_token, apns_environment = excluded.apns_environment, bundle_id = excluded.bundle_id,
                app_version = excluded.app_version, sdk_version = excluded.sdk_version, web_endpoint = excluded.web_endpoint,
                web_auth = excluded.web_auth, web_p256dh = excluded.web_p256dh, web_app_key = excluded.web_app_key,
                web_origin = excluded.web_origin, state = excluded.state, client_time = excluded.client_time,
                expired_reported = false,
                created_at = CASE WHEN registrations.token = \(unsafeSQL: token) THEN registrations.created_at
                    ELSE excluded.created_at END,
                refreshed_at = excluded.refreshed_at
            RETURNING *
            """
    }

    func fids(projectID: String, tokens: [String]) async throws -> [String: String] {
        guard !tokens.isEmpty else { return [:] }
        var out: [String: String] = [:]
        for row in try await db.query(
            """
            SELECT token, fid FROM registrations WHERE project_id = \(projectID) AND token = ANY(\(TextArray(tokens))::text[])
            """)
        {
            out[try row.require("token")] = try row.require("fid")
        }
        return out
    }

    func find(projectID: String, fid: String) async throws -> Registration? {
        try await db.batchedRead("SELECT * FROM registrations WHERE project_id = \(projectID) AND fid = \(fid)").first
            .map(Self.decode)
    }

    func find(projectID: String, token: String) async throws -> Registration? {
        try await db.batchedRead(
            "SELECT * FROM registrations WHERE project_id = \(projectID) AND token = \(token)"
        ).first.map(Self.decode)
    }

    /// The registration and, with it, the installation's topic subscriptions: a token's topics end with it, as they
    /// do at FCM, so the next token of the installation (a new user after a logout's `deleteToken`, iOS's
    /// `deleteData`) starts with none. The installation's lock first, in a statement of its own, as every topic
    /// change takes it: a subscription that committed while the delete waited is seen and removed too.
    func delete(projectID: String, fid: String) async throws -> Bool {
        try await db.transaction { c in
            try await c.query("SELECT 1 FROM installations WHERE project_id = \(projectID) AND fid = \(fid) FOR UPDATE")
            let deleted = try await c.query(
                "DELETE FROM registrations WHERE project_id = \(projectID) AND fid = \(fid)"
            ).affectedRows == 1
            try await c.query("DELETE FROM topic_subscriptions WHERE project_id = \(projectID) AND fid = \(fid)")
            return deleted
        }
    }

    /// The advisory-lock class of APNs imports: the two-key form, a lock space of its own beside the one-key person
    /// locks.
    static let apnsImportLockClass: Int32 = 0x4150_4e53

    /// Takes the transaction's locks of `tokens` (by their project and lower-case text) in ascending order.
    static func apnsImportLocks(projectID: String, tokens: [String]) -> PostgresQuery {
        """
        SELECT pg_advisory_xact_lock(\(Int(apnsImportLockClass))::int, h) FROM (
            SELECT DISTINCT hashtext(\(projectID) || '/' || lower(t)) AS h FROM unnest(\(TextArray(tokens))::text[]) t
            ORDER BY 1) x
        """
    }

    func importAPNs(_ items: [APNsImport], initialConsent: Bool, create: Bool) async throws -> [String: String] {
        guard !items.isEmpty else { return [:] }
        return try await db.transaction { c in
            // Each APNs token's lock, in one order (``apnsImportLocks``): two imports of one token at once (a retried
            // call) each found none and made an installation each; now the second looks in a snapshot after the
            // first committed. Imports of other tokens do not wait (a hash that collides only makes two wait).
            if let project = items.first?.registration.projectID {
                try await c.query(Self.apnsImportLocks(projectID: project, tokens: items.map(\.apnsToken)))
            }
            var tokens: [String: String] = [:]
            for item in items {
                let r = item.registration
                if let existing = try await c.query(
                    """
                    SELECT token FROM registrations WHERE project_id = \(r.projectID) AND apns_token = \(item.apnsToken)
                    ORDER BY created_at LIMIT 1
                    """
                ).first {
                    tokens[item.apnsToken] = try existing.require("token")
                    continue
                }
                guard create else { continue }
                let made = try await c.query(
                    PostgresInstallationStore.creation(
                        item.installation, fidHash: item.fidHash, initialConsent: initialConsent))
                guard try made.first?.require("created", as: Int.self) == 1 else {
                    throw RegistryError(.unavailable, "a generated installation ID was taken; retry")
                }
                try await c.query(Self.upsert(r, keepToken: false))
                try await Outbox.append(
                    .registrationCreated, projectID: r.projectID, fid: r.fid, payload: Outbox.platform(r.platform),
                    on: c)
                tokens[item.apnsToken] = r.token
            }
            return tokens
        }
    }

    static func decode(_ row: PostgresRow) throws -> Registration {
        var web: WebPush?
        if let endpoint: String = try row.decode("web_endpoint") {
            web = WebPush(
                endpoint: endpoint, auth: try row.decode("web_auth") ?? "", p256dh: try row.decode("web_p256dh") ?? "",
                applicationPubKey: try row.decode("web_app_key"), origin: try row.decode("web_origin"))
        }
        return Registration(
            projectID: try row.require("project_id"), fid: try row.require("fid"), token: try row.require("token"),
            platform: try row.require("platform", as: Platform.self), apnsToken: try row.decode("apns_token"),
            apnsEnvironment: try row.decode("apns_environment", as: APNsEnvironment.self),
            bundleID: try row.decode("bundle_id"), appVersion: try row.decode("app_version"),
            sdkVersion: try row.decode("sdk_version"), web: web,
            state: try row.require("state", as: RegistrationState.self), clientTime: try row.decode("client_time"),
            createdAt: try row.require("created_at"), refreshedAt: try row.require("refreshed_at"),
            retirement: try Self.retirement(row), quarantine: try Self.quarantine(row))
    }

    static func retirement(_ row: PostgresRow) throws -> Retirement? {
        guard let at: Date = try row.decode("retired_at") else { return nil }
        return Retirement(
            reason: try row.decode("retired_reason") ?? "", channel: try row.require("retired_channel", as: FeedbackChannel.self),
            at: at, invalidSince: try row.decode("invalid_since"))
    }

    static func quarantine(_ row: PostgresRow) throws -> Quarantine? {
        guard let at: Date = try row.decode("quarantined_at") else { return nil }
        return Quarantine(
            reason: try row.decode("quarantine_reason") ?? "",
            channel: try row.require("quarantine_channel", as: FeedbackChannel.self), at: at,
            byBreaker: try row.require("quarantined_by_breaker"))
    }
}
