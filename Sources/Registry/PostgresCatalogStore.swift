import Postgres

/// ``CatalogStore`` on PostgreSQL.
public struct PostgresCatalogStore: CatalogStore {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    public func insertProject(_ project: Project, serverKeyHash: [UInt8]) async throws {
        do {
            try await pool.withTransaction { c in
                try await c.query(
                    "INSERT INTO projects (project_id, project_number) VALUES (\(project.id), \(project.number))")
                try await c.query(
                    "INSERT INTO server_keys (key_hash, project_id) VALUES (\(ByteA(serverKeyHash)), \(project.id))")
            }
        } catch let error as PostgresError where error.sqlState == PostgresError.uniqueViolation {
            throw RegistryError(.alreadyExists, "a project with this ID or number already exists")
        }
    }

    public func insertApp(_ app: App) async throws {
        try await pool.query(
            """
            INSERT INTO apps (app_id, project_id, platform, bundle_id, api_key, auto_init_default)
            VALUES (\(app.id), \(app.projectID), \(app.platform.rawValue), \(app.bundleID), \(app.apiKey), \(app.autoInitDefault))
            """)
    }

    public func project(idOrNumber: String) async throws -> Project? {
        let rows: PostgresRows
        if let number = Int64(idOrNumber), idOrNumber.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) {
            rows = try await pool.query(
                "SELECT project_id, project_number FROM projects WHERE project_number = \(number)")
        } else {
            rows = try await pool.query(
                "SELECT project_id, project_number FROM projects WHERE project_id = \(idOrNumber)")
        }
        guard let row = rows.first else { return nil }
        return Project(id: try row.require("project_id"), number: try row.require("project_number"))
    }

    public func app(id: String) async throws -> App? {
        try decodeApp(try await pool.query("SELECT * FROM apps WHERE app_id = \(id)").first)
    }

    public func app(apiKey: String) async throws -> App? {
        try decodeApp(try await pool.query("SELECT * FROM apps WHERE api_key = \(apiKey)").first)
    }

    public func projectID(serverKeyHash: [UInt8]) async throws -> String? {
        try await pool.query("SELECT project_id FROM server_keys WHERE key_hash = \(ByteA(serverKeyHash))").first?
            .require("project_id")
    }

    public func apps(projectID: String) async throws -> [App] {
        try await pool.query("SELECT * FROM apps WHERE project_id = \(projectID) ORDER BY app_id").compactMap {
            try decodeApp($0)
        }
    }

    private func decodeApp(_ row: PostgresRow?) throws -> App? {
        guard let row else { return nil }
        return App(
            id: try row.require("app_id"), projectID: try row.require("project_id"),
            platform: Platform(rawValue: try row.require("platform")) ?? .web, bundleID: try row.decode("bundle_id"),
            apiKey: try row.require("api_key"), autoInitDefault: try row.require("auto_init_default"))
    }
}
