import Foundation
import Postgres
import Registry

/// ``CatalogStore`` on PostgreSQL.
struct PostgresCatalogStore: CatalogStore {
    let db: Database

    init(db: Database) { self.db = db }

    func insertProject(_ project: Project, serverKeyHash: [UInt8]) async throws {
        do {
            try await db.transaction { c in
                try await c.query(
                    "INSERT INTO projects (project_id, project_number) VALUES (\(project.id), \(project.number))")
                try await c.query(
                    "INSERT INTO server_keys (key_hash, project_id) VALUES (\(ByteA(serverKeyHash)), \(project.id))")
            }
        } catch let error as RegistryError where error.kind == .alreadyExists {
            throw RegistryError(.alreadyExists, "a project with this ID or number already exists")
        }
    }

    func insertApp(_ app: App) async throws {
        try await db.transaction { c in
            // A key is its project's: the first app to hold it claims it (a concurrent claim of another project waits
            // for this one, then sees it).
            try await c.query(
                "INSERT INTO api_keys (api_key, project_id) VALUES (\(app.apiKey), \(app.projectID)) ON CONFLICT DO NOTHING")
            let owner: String? = try await c.query("SELECT project_id FROM api_keys WHERE api_key = \(app.apiKey)")
                .first?.require("project_id")
            guard owner == app.projectID else { throw RegistryError(.alreadyExists, Catalog.keyOfAnotherProject) }
            try await c.query(
                """
                INSERT INTO apps (app_id, project_id, platform, bundle_id, api_key, auto_init_default, web_origins)
                VALUES (\(app.id), \(app.projectID), \(app.platform.rawValue), \(app.bundleID), \(app.apiKey),
                    \(app.autoInitDefault), \(app.webOrigins.joined(separator: " ")))
                """)
        }
    }

    func project(idOrNumber: String) async throws -> Project? {
        let rows: PostgresRows
        if let number = Int64(idOrNumber), idOrNumber.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) {
            rows = try await db.query(
                "SELECT project_id, project_number FROM projects WHERE project_number = \(number)")
        } else {
            rows = try await db.query(
                "SELECT project_id, project_number FROM projects WHERE project_id = \(idOrNumber)")
        }
        guard let row = rows.first else { return nil }
        return Project(id: try row.require("project_id"), number: try row.require("project_number"))
    }

    func app(id: String) async throws -> App? {
        try decodeApp(try await db.query("SELECT * FROM apps WHERE app_id = \(id)").first)
    }

    func apps(apiKey: String) async throws -> [App] {
        try await db.query("SELECT * FROM apps WHERE api_key = \(apiKey) ORDER BY app_id").compactMap { try decodeApp($0) }
    }

    func projectID(serverKeyHash: [UInt8]) async throws -> String? {
        try await db.query(
            """
            SELECT project_id FROM server_keys WHERE key_hash = \(ByteA(serverKeyHash))
            AND (expires_at IS NULL OR expires_at > now())
            """
        ).first?.require("project_id")
    }

    func addServerKey(projectID: String, hash: [UInt8], at: Date, othersExpireAt: Date) async throws {
        try await db.transaction { c in
            try await c.query(
                """
                UPDATE server_keys SET expires_at = \(othersExpireAt)
                WHERE project_id = \(projectID) AND (expires_at IS NULL OR expires_at > \(othersExpireAt))
                """)
            try await c.query(
                "INSERT INTO server_keys (key_hash, project_id, created_at) VALUES (\(ByteA(hash)), \(projectID), \(at))"
            )
        }
    }

    func revokeServerKeys(projectID: String, keepNewest: Bool, at: Date) async throws -> Int {
        try await db.query(
            """
            UPDATE server_keys SET expires_at = \(at)
            WHERE project_id = \(projectID) AND (expires_at IS NULL OR expires_at > \(at))
              AND (NOT \(keepNewest) OR key_hash <> (SELECT key_hash FROM server_keys WHERE project_id = \(projectID)
                  ORDER BY created_at DESC, key_hash LIMIT 1))
            """
        ).affectedRows
    }

    func apps(projectID: String) async throws -> [App] {
        try await db.query("SELECT * FROM apps WHERE project_id = \(projectID) ORDER BY app_id").compactMap {
            try decodeApp($0)
        }
    }

    private func decodeApp(_ row: PostgresRow?) throws -> App? {
        guard let row else { return nil }
        return App(
            id: try row.require("app_id"), projectID: try row.require("project_id"),
            platform: try row.require("platform", as: Platform.self), bundleID: try row.decode("bundle_id"),
            apiKey: try row.require("api_key"), autoInitDefault: try row.require("auto_init_default"),
            webOrigins: (try row.require("web_origins", as: String.self)).split(separator: " ").map(String.init))
    }
}
