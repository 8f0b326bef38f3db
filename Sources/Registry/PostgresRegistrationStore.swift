import Foundation
import Postgres

/// ``RegistrationStore`` on PostgreSQL.
public struct PostgresRegistrationStore: RegistrationStore {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    public func upsert(_ r: Registration) async throws -> Registration {
        try await pool.withTransaction { c in
            // A token held by another installation leaves it (tokens are unique per project).
            try await c.query(
                "DELETE FROM registrations WHERE project_id = \(r.projectID) AND token = \(r.token) AND fid <> \(r.fid)"
            )
            let existed =
                !(try await c.query("SELECT 1 FROM registrations WHERE project_id = \(r.projectID) AND fid = \(r.fid)")
                .isEmpty)
            try await Self.write(r, on: c)
            try await Self.event(existed ? "registration.refreshed" : "registration.created", r, on: c)
            return r
        }
    }

    /// One statement on the common path: lock the installation, check its messaging consent and the stored
    /// `clientTime`, upsert. A token that must move from another installation trips the unique index inside that
    /// statement; that rare case is redone step by step in a transaction.
    public func refresh(_ r: Registration) async throws -> RefreshResult {
        do {
            return try await refreshInOneStatement(r)
        } catch let error as PostgresError where error.sqlState == PostgresError.uniqueViolation {
            return try await refreshStepByStep(r)
        }
    }

    private func refreshInOneStatement(_ r: Registration) async throws -> RefreshResult {
        let rows = try await pool.query(
            """
            WITH subject AS (
                SELECT i.fid, coalesce(c.granted, false) AS granted FROM installations i
                LEFT JOIN consents c ON c.project_id = i.project_id AND c.fid = i.fid AND c.purpose = 'messaging'
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
                SELECT \(r.projectID), \(r.fid), \(r.token), \(r.platform.rawValue), \(r.apnsToken), \(r.apnsEnvironment), 'active',
                    \(r.clientTime)::timestamptz, \(r.createdAt), \(r.refreshedAt) FROM allowed
                ON CONFLICT (project_id, fid) DO UPDATE SET token = excluded.token, platform = excluded.platform,
                    apns_token = excluded.apns_token, apns_environment = excluded.apns_environment, state = 'active',
                    client_time = excluded.client_time, expired_reported = false,
                    created_at = CASE WHEN registrations.token = excluded.token THEN registrations.created_at ELSE excluded.created_at END,
                    refreshed_at = excluded.refreshed_at
                RETURNING *
            ), event AS (
                INSERT INTO event_outbox (project_id, type, fid, data)
                SELECT \(r.projectID), CASE WHEN NOT EXISTS (SELECT 1 FROM current) THEN 'registration.created'
                    ELSE 'registration.refreshed' END, \(r.fid), \("{\"platform\":\"\(r.platform.rawValue)\"}") FROM written
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

    private func refreshStepByStep(_ r: Registration) async throws -> RefreshResult {
        try await pool.withTransaction { c in
            // Lock the installation so concurrent callbacks for it are ordered.
            let subject = try await c.query(
                """
                SELECT coalesce(c.granted, false) AS granted FROM installations i
                LEFT JOIN consents c ON c.project_id = i.project_id AND c.fid = i.fid AND c.purpose = 'messaging'
                WHERE i.project_id = \(r.projectID) AND i.fid = \(r.fid) FOR UPDATE OF i
                """)
            guard let row = subject.first else { return .installationNotFound }
            guard try row.require("granted", as: Bool.self) else { return .consentOff }
            let current = try await c.query(
                "SELECT * FROM registrations WHERE project_id = \(r.projectID) AND fid = \(r.fid)"
            )
            .first.map(Self.decode)
            if let current, let stored = current.clientTime, let incoming = r.clientTime, incoming < stored {
                return .stored(current, .ignoredAsOlder)
            }
            let moved = try await c.query(
                "DELETE FROM registrations WHERE project_id = \(r.projectID) AND token = \(r.token) AND fid <> \(r.fid) RETURNING fid"
            )
            var stored = r
            if let current, current.token == r.token { stored.createdAt = current.createdAt }
            try await Self.write(stored, on: c)
            let outcome: RefreshOutcome
            if !moved.isEmpty {
                outcome = .moved
            } else if let current {
                outcome = current.token == r.token ? .refreshed : .superseded
            } else {
                outcome = .created
            }
            try await Self.event(
                outcome == .moved
                    ? "registration.moved" : current == nil ? "registration.created" : "registration.refreshed",
                stored, on: c)
            return .stored(stored, outcome)
        }
    }

    public func fids(projectID: String, tokens: [String]) async throws -> [String: String] {
        guard !tokens.isEmpty else { return [:] }
        var out: [String: String] = [:]
        for row in try await pool.query(
            """
            SELECT token, fid FROM registrations WHERE project_id = \(projectID) AND token = ANY(\(TextArray(tokens))::text[])
            """)
        {
            out[try row.require("token")] = try row.require("fid")
        }
        return out
    }

    private static func event(_ type: String, _ r: Registration, on c: PostgresConnection) async throws {
        try await c.query(
            """
            INSERT INTO event_outbox (project_id, type, fid, data)
            VALUES (\(r.projectID), \(type), \(r.fid), \("{\"platform\":\"\(r.platform.rawValue)\"}"))
            """)
    }

    private static func write(_ r: Registration, on c: PostgresConnection) async throws {
        try await c.query(
            """
            INSERT INTO registrations (project_id, fid, token, platform, apns_token, apns_environment, bundle_id, app_version,
                sdk_version, web_endpoint, web_auth, web_p256dh, web_app_key, web_origin, state, client_time, created_at, refreshed_at)
            VALUES (\(r.projectID), \(r.fid), \(r.token), \(r.platform.rawValue), \(r.apnsToken), \(r.apnsEnvironment), \(r.bundleID),
                \(r.appVersion), \(r.sdkVersion), \(r.web?.endpoint), \(r.web?.auth), \(r.web?.p256dh), \(r.web?.applicationPubKey),
                \(r.web?.origin), \(r.state), \(r.clientTime), \(r.createdAt), \(r.refreshedAt))
            ON CONFLICT (project_id, fid) DO UPDATE SET token = excluded.token, platform = excluded.platform,
                apns_token = excluded.apns_token, apns_environment = excluded.apns_environment, bundle_id = excluded.bundle_id,
                app_version = excluded.app_version, sdk_version = excluded.sdk_version, web_endpoint = excluded.web_endpoint,
                web_auth = excluded.web_auth, web_p256dh = excluded.web_p256dh, web_app_key = excluded.web_app_key,
                web_origin = excluded.web_origin, state = excluded.state, client_time = excluded.client_time, expired_reported = false,
                created_at = CASE WHEN registrations.token = excluded.token THEN registrations.created_at ELSE excluded.created_at END,
                refreshed_at = excluded.refreshed_at
            """)
    }

    public func find(projectID: String, fid: String) async throws -> Registration? {
        try await pool.query("SELECT * FROM registrations WHERE project_id = \(projectID) AND fid = \(fid)").first.map(
            Self.decode)
    }

    public func find(projectID: String, token: String) async throws -> Registration? {
        try await pool.query("SELECT * FROM registrations WHERE project_id = \(projectID) AND token = \(token)").first
            .map(Self.decode)
    }

    public func find(projectID: String, apnsToken: String) async throws -> Registration? {
        try await pool.query(
            "SELECT * FROM registrations WHERE project_id = \(projectID) AND apns_token = \(apnsToken) LIMIT 1"
        )
        .first.map(Self.decode)
    }

    public func delete(projectID: String, fid: String) async throws -> Bool {
        try await pool.query("DELETE FROM registrations WHERE project_id = \(projectID) AND fid = \(fid)").affectedRows
            == 1
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
            platform: Platform(rawValue: try row.require("platform")) ?? .web, apnsToken: try row.decode("apns_token"),
            apnsEnvironment: try row.decode("apns_environment"), bundleID: try row.decode("bundle_id"),
            appVersion: try row.decode("app_version"), sdkVersion: try row.decode("sdk_version"), web: web,
            state: try row.require("state"), clientTime: try row.decode("client_time"),
            createdAt: try row.require("created_at"),
            refreshedAt: try row.require("refreshed_at"))
    }
}
