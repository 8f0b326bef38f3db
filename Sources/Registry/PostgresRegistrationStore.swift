import Foundation
import Postgres

/// ``RegistrationStore`` on PostgreSQL.
public struct PostgresRegistrationStore: RegistrationStore {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    public func upsert(_ r: Registration) async throws -> Registration {
        try await pool.withTransaction { c in
            // A token held by another installation leaves it (tokens are unique per project).
            try await c.query("DELETE FROM registrations WHERE project_id = \(r.projectID) AND token = \(r.token) AND fid <> \(r.fid)")
            try await Self.write(r, on: c)
            return r
        }
    }

    public func refresh(_ r: Registration) async throws -> (Registration, RefreshOutcome) {
        try await pool.withTransaction { c in
            // Lock the installation so concurrent callbacks for it are ordered.
            try await c.query("SELECT 1 FROM installations WHERE project_id = \(r.projectID) AND fid = \(r.fid) FOR UPDATE")
            let current = try await c.query("SELECT * FROM registrations WHERE project_id = \(r.projectID) AND fid = \(r.fid)")
                .first.map(Self.decode)
            if let current, let stored = current.clientTime, let incoming = r.clientTime, incoming < stored {
                return (current, .ignoredAsOlder)
            }
            let moved = try await c.query(
                "DELETE FROM registrations WHERE project_id = \(r.projectID) AND token = \(r.token) AND fid <> \(r.fid) RETURNING fid")
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
            return (stored, outcome)
        }
    }

    private static func write(_ r: Registration, on c: PostgresConnection) async throws {
        try await c.query("""
            INSERT INTO registrations (project_id, fid, token, platform, apns_token, apns_environment, bundle_id, app_version,
                sdk_version, web_endpoint, web_auth, web_p256dh, web_app_key, web_origin, state, client_time, created_at, refreshed_at)
            VALUES (\(r.projectID), \(r.fid), \(r.token), \(r.platform.rawValue), \(r.apnsToken), \(r.apnsEnvironment), \(r.bundleID),
                \(r.appVersion), \(r.sdkVersion), \(r.web?.endpoint), \(r.web?.auth), \(r.web?.p256dh), \(r.web?.applicationPubKey),
                \(r.web?.origin), \(r.state), \(r.clientTime), \(r.createdAt), \(r.refreshedAt))
            ON CONFLICT (project_id, fid) DO UPDATE SET token = excluded.token, platform = excluded.platform,
                apns_token = excluded.apns_token, apns_environment = excluded.apns_environment, bundle_id = excluded.bundle_id,
                app_version = excluded.app_version, sdk_version = excluded.sdk_version, web_endpoint = excluded.web_endpoint,
                web_auth = excluded.web_auth, web_p256dh = excluded.web_p256dh, web_app_key = excluded.web_app_key,
                web_origin = excluded.web_origin, state = excluded.state, client_time = excluded.client_time,
                created_at = CASE WHEN registrations.token = excluded.token THEN registrations.created_at ELSE excluded.created_at END,
                refreshed_at = excluded.refreshed_at
            """)
    }

    public func find(projectID: String, fid: String) async throws -> Registration? {
        try await pool.query("SELECT * FROM registrations WHERE project_id = \(projectID) AND fid = \(fid)").first.map(Self.decode)
    }

    public func find(projectID: String, token: String) async throws -> Registration? {
        try await pool.query("SELECT * FROM registrations WHERE project_id = \(projectID) AND token = \(token)").first.map(Self.decode)
    }

    public func find(projectID: String, apnsToken: String) async throws -> Registration? {
        try await pool.query("SELECT * FROM registrations WHERE project_id = \(projectID) AND apns_token = \(apnsToken) LIMIT 1")
            .first.map(Self.decode)
    }

    public func delete(projectID: String, fid: String) async throws -> Bool {
        try await pool.query("DELETE FROM registrations WHERE project_id = \(projectID) AND fid = \(fid)").affectedRows == 1
    }

    static func decode(_ row: PostgresRow) throws -> Registration {
        var web: WebPush?
        if let endpoint: String = try row.decode("web_endpoint") {
            web = WebPush(endpoint: endpoint, auth: try row.decode("web_auth") ?? "", p256dh: try row.decode("web_p256dh") ?? "",
                          applicationPubKey: try row.decode("web_app_key"), origin: try row.decode("web_origin"))
        }
        return Registration(
            projectID: try row.require("project_id"), fid: try row.require("fid"), token: try row.require("token"),
            platform: Platform(rawValue: try row.require("platform")) ?? .web, apnsToken: try row.decode("apns_token"),
            apnsEnvironment: try row.decode("apns_environment"), bundleID: try row.decode("bundle_id"),
            appVersion: try row.decode("app_version"), sdkVersion: try row.decode("sdk_version"), web: web,
            state: try row.require("state"), clientTime: try row.decode("client_time"), createdAt: try row.require("created_at"),
            refreshedAt: try row.require("refreshed_at"))
    }
}
