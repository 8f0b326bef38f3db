import Foundation
import Postgres
import Registry

/// ``ServiceAccountStore`` on PostgreSQL: `service_accounts` (public keys only).
struct PostgresServiceAccountStore: ServiceAccountStore {
    let db: Database

    func insert(_ a: ServiceAccount) async throws {
        try await db.query(
            """
            INSERT INTO service_accounts (key_id, project_id, client_email, public_key, token_uri, created_at)
            VALUES (\(a.keyID), \(a.projectID), \(a.clientEmail), \(a.publicKeyPEM), \(a.tokenURI), \(a.createdAt))
            """)
    }

    func account(keyID: String) async throws -> ServiceAccount? {
        try await db.query("SELECT * FROM service_accounts WHERE key_id = \(keyID)").first.map(Self.decode)
    }

    func account(clientEmail: String) async throws -> ServiceAccount? {
        try await db.query("SELECT * FROM service_accounts WHERE client_email = \(clientEmail)").first.map(Self.decode)
    }

    func accounts(projectID: String) async throws -> [ServiceAccount] {
        try await db.query(
            "SELECT * FROM service_accounts WHERE project_id = \(projectID) ORDER BY created_at, key_id"
        ).map(Self.decode)
    }

    func revoke(keyID: String, at: Date) async throws -> Bool {
        try await db.query(
            "UPDATE service_accounts SET revoked_at = \(at) WHERE key_id = \(keyID) AND revoked_at IS NULL"
        ).affectedRows == 1
    }

    static func decode(_ row: PostgresRow) throws -> ServiceAccount {
        ServiceAccount(
            projectID: try row.require("project_id"), keyID: try row.require("key_id"),
            clientEmail: try row.require("client_email"), publicKeyPEM: try row.require("public_key"),
            tokenURI: try row.require("token_uri"), createdAt: try row.require("created_at"),
            revokedAt: try row.decode("revoked_at"))
    }
}
