import Foundation
import Postgres
import Registry

/// The domain's stores on one PostgreSQL database: what the composition root hands to ``RegistryServices``.
public enum PostgresRegistry {
    /// The pool the stores share.
    ///
    /// - Parameters:
    ///   - acquireTimeoutMillis: how long a caller waits for a free connection (then `.unavailable`).
    ///   - statementTimeoutMillis: each connection's `statement_timeout`; 0 keeps the server's.
    public static func pool(conninfo: String, size: Int, acquireTimeoutMillis: Int, statementTimeoutMillis: Int)
        -> PostgresPool
    {
        PostgresPool(
            .init(
                conninfo: conninfo, maxConnections: size, acquireTimeout: .milliseconds(acquireTimeoutMillis),
                statementTimeout: statementTimeoutMillis > 0 ? .milliseconds(statementTimeoutMillis) : nil))
    }

    /// Every store of ``RegistryStores``, sharing `pool`.
    public static func stores(pool: PostgresPool) -> RegistryStores {
        let db = Database(pool: pool)
        return RegistryStores(
            catalog: PostgresCatalogStore(db: db), installations: PostgresInstallationStore(db: db),
            consent: PostgresConsentStore(db: db), registrations: PostgresRegistrationStore(db: db),
            topics: PostgresTopicStore(db: db), targeting: PostgresTargetingStore(db: db),
            deletions: PostgresDeletionStore(db: db), deliveries: PostgresDeliveryStore(db: db),
            maintenance: PostgresMaintenanceStore(db: db), feed: PostgresChangeFeedStore(db: db),
            signingKeys: PostgresSigningKeyStore(db: db), secrets: PostgresSecretStore(db: db),
            serviceAccounts: PostgresServiceAccountStore(db: db), checkins: PostgresCheckinStore(db: db),
            health: PostgresStoreHealth(pool: pool))
    }
}

/// ``SigningKeyStore`` on PostgreSQL: `signing_keys`.
struct PostgresSigningKeyStore: SigningKeyStore {
    let db: Database

    func all() async throws -> [StoredSigningKey] {
        try await db.query("SELECT kid, private_pem, created_at FROM signing_keys ORDER BY created_at, kid").map {
            StoredSigningKey(
                kid: try $0.require("kid"), privatePEM: try $0.require("private_pem"),
                createdAt: try $0.require("created_at"))
        }
    }

    func insert(_ key: StoredSigningKey) async throws {
        try await db.query(
            "INSERT INTO signing_keys (kid, private_pem, created_at) VALUES (\(key.kid), \(key.privatePEM), \(key.createdAt))"
        )
    }

    func insertFirst(_ key: StoredSigningKey) async throws {
        try await db.query(
            """
            INSERT INTO signing_keys (kid, private_pem, created_at)
            SELECT \(key.kid), \(key.privatePEM), \(key.createdAt) WHERE NOT EXISTS (SELECT 1 FROM signing_keys)
            """)
    }
}

/// ``StoreHealth`` of the pool: ready when the database answers and every migration is applied.
struct PostgresStoreHealth: StoreHealth {
    let pool: PostgresPool

    func unreadiness() async -> String? {
        do {
            return try await Schema.migrator.isCurrent(on: pool) ? nil : "migrations pending"
        } catch {
            return "database unreachable"
        }
    }

    var connections: (inUse: Int, idle: Int, waiting: Int) {
        let statistics = pool.statistics
        return (statistics.inUse, statistics.idle, statistics.waiting)
    }

    func close() { pool.close() }
}
