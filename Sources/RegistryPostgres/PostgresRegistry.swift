import Crypto
import Foundation
import Postgres
import Registry

/// The domain's stores on one PostgreSQL database: what the composition root hands to ``RegistryServices``.
public enum PostgresRegistry {
    /// The advisory lock a person's login, logout, move and erasure take, as `pg_advisory_xact_lock(class, key)`
    /// arguments, for the user's keyed hash (``UserService/userHash(projectID:userID:)``): a test's second session
    /// takes it to make those requests queue.
    public static func userLock(userHash: [UInt8]) -> (class: Int32, key: Int32) {
        (Int32(PostgresUserStore.lockClass), PostgresUserStore.lockKey(userHash))
    }

    /// The locks an APNs import takes for `tokens` (a test's second session takes them to make imports queue).
    public static func apnsImportLocks(projectID: String, tokens: [String]) -> PostgresQuery {
        PostgresRegistrationStore.apnsImportLocks(projectID: projectID, tokens: tokens)
    }

    /// The pool the stores share.
    ///
    /// - Parameters:
    ///   - acquireTimeoutMillis: how long a caller waits for a free connection (then `.unavailable`).
    ///   - statementTimeoutMillis: each connection's `statement_timeout`; 0 keeps the server's.
    ///   - groupCommitMax: at most this many concurrent writes committed together (1: each alone).
    ///   - readBatchMax: at most this many concurrent point reads sent in one round trip (1: each alone).
    ///   - transactionPooled: `conninfo` names a pooler in transaction mode (pgbouncer): nothing is kept on a session.
    ///   - batchLockWaitMillis: how long a write of a group-committed batch waits for a lock before it runs alone (0:
    ///     unbounded).
    ///   - projectShare: the most connections one project's requests (``Tenant``) hold at once (0: a quarter of
    ///     `size`).
    public static func pool(
        conninfo: String, size: Int, acquireTimeoutMillis: Int, statementTimeoutMillis: Int, groupCommitMax: Int = 64,
        readBatchMax: Int = 64, transactionPooled: Bool = false, batchLockWaitMillis: Int = 250, projectShare: Int = 0
    ) -> PostgresPool {
        var configuration = PostgresPool.Configuration(
            conninfo: conninfo, maxConnections: size, acquireTimeout: .milliseconds(acquireTimeoutMillis),
            statementTimeout: statementTimeoutMillis > 0 ? .milliseconds(statementTimeoutMillis) : nil,
            groupCommitBatch: groupCommitMax, readBatch: readBatchMax, transactionPooled: transactionPooled)
        configuration.groupCommitLockWait = batchLockWaitMillis > 0 ? .milliseconds(batchLockWaitMillis) : nil
        configuration.tenantShare = projectShare > 0 ? projectShare : nil
        return PostgresPool(configuration)
    }

    /// Every store of ``RegistryStores``, sharing `pool`.
    /// - Parameters:
    ///   - box: seals the secrets the stores keep, under the operator's master key.
    ///   - readPool: a read replica's pool, closed with `pool` at shutdown (its stores: ``readStores(pool:primary:box:)``).
    public static func stores(pool: PostgresPool, box: SecretBox, readPool: PostgresPool? = nil) -> RegistryStores {
        stores(db: Database(pool: pool, box: box), health: PostgresStoreHealth(pool: pool, readPool: readPool))
    }

    /// The stores on a streaming-replication standby, for ``RegistryServices`` `reads`: a read that cannot reach the
    /// standby goes to `primary`.
    public static func readStores(pool: PostgresPool, primary: PostgresPool, box: SecretBox) -> RegistryStores {
        stores(db: Database(pool: pool, box: box, fallback: primary), health: PostgresStoreHealth(pool: primary))
    }

    private static func stores(db: Database, health: PostgresStoreHealth) -> RegistryStores {
        RegistryStores(
            catalog: PostgresCatalogStore(db: db), installations: PostgresInstallationStore(db: db),
            consent: PostgresConsentStore(db: db), registrations: PostgresRegistrationStore(db: db),
            topics: PostgresTopicStore(db: db), targeting: PostgresTargetingStore(db: db),
            deletions: PostgresDeletionStore(db: db), deliveries: PostgresDeliveryStore(db: db),
            maintenance: PostgresMaintenanceStore(db: db), feed: PostgresChangeFeedStore(db: db),
            signingKeys: PostgresSigningKeyStore(db: db), secrets: PostgresSecretStore(db: db),
            serviceAccounts: PostgresServiceAccountStore(db: db), checkins: PostgresCheckinStore(db: db),
            feedback: PostgresFeedbackStore(db: db), users: PostgresUserStore(db: db),
            erasures: PostgresErasureStore(db: db), subjects: PostgresUserStore(db: db),
            audit: PostgresAuditStore(db: db), imports: PostgresImportStore(db: db), health: health)
    }
}

/// ``SigningKeyStore`` on PostgreSQL: `signing_keys`, private keys sealed.
struct PostgresSigningKeyStore: SigningKeyStore {
    let db: Database

    static func context(_ kid: String) -> String { "signing_keys:" + kid }

    func all() async throws -> [StoredSigningKey] {
        try await db.query(
            "SELECT kid, private_pem, created_at, retired_at FROM signing_keys ORDER BY created_at, kid"
        ).map {
            let kid: String = try $0.require("kid")
            return StoredSigningKey(
                kid: kid, privatePEM: try db.open(try $0.require("private_pem"), context: Self.context(kid)),
                createdAt: try $0.require("created_at"), retiredAt: try $0.decode("retired_at"))
        }
    }

    func insert(_ key: StoredSigningKey) async throws {
        let sealed = try db.seal(key.privatePEM, context: Self.context(key.kid))
        try await db.query(
            "INSERT INTO signing_keys (kid, private_pem, created_at) VALUES (\(key.kid), \(sealed), \(key.createdAt))")
    }

    func insertFirst(_ key: StoredSigningKey) async throws {
        let sealed = try db.seal(key.privatePEM, context: Self.context(key.kid))
        try await db.query(
            """
            INSERT INTO signing_keys (kid, private_pem, created_at)
            SELECT \(key.kid), \(sealed), \(key.createdAt)
            WHERE NOT EXISTS (SELECT 1 FROM signing_keys WHERE retired_at IS NULL)
            """)
    }

    func retire(kid: String, at: Date) async throws -> Bool {
        try await db.query(
            "UPDATE signing_keys SET retired_at = \(at) WHERE kid = \(kid) AND retired_at IS NULL"
        ).affectedRows == 1
    }
}

/// ``StoreHealth`` of the pool: ready when the database answers and every migration is applied.
struct PostgresStoreHealth: StoreHealth {
    let pool: PostgresPool
    var readPool: PostgresPool? = nil

    func unreadiness() async -> String? {
        do {
            return try await Schema.migrator.isCurrent(on: pool) ? nil : "migrations pending"
        } catch {
            return "database unreachable"
        }
    }

    var statistics: StoreStatistics {
        let pool = pool.statistics
        var statistics = StoreStatistics()
        (statistics.inUse, statistics.idle, statistics.waiting) = (pool.inUse, pool.idle, pool.waiting)
        statistics.queuedWrites = pool.queuedWrites
        statistics.groupCommits = pool.groupCommits
        statistics.groupCommittedWrites = pool.groupCommittedWrites
        statistics.writesRetriedAlone = pool.writesRetriedAlone
        statistics.writesLockWaitedAlone = pool.writesLockWaitedAlone
        // Batched reads run on the read replica's pool too (targeting, sendability): counted together.
        let replica = readPool?.statistics
        statistics.queuedReads = pool.queuedReads + (replica?.queuedReads ?? 0)
        statistics.readBatches = pool.readBatches + (replica?.readBatches ?? 0)
        statistics.batchedReads = pool.batchedReads + (replica?.batchedReads ?? 0)
        statistics.readsRunAlone = pool.readsRunAlone + (replica?.readsRunAlone ?? 0)
        statistics.replica = replica.map { PoolConnections(inUse: $0.inUse, idle: $0.idle, waiting: $0.waiting) }
        return statistics
    }

    func close() {
        pool.close()
        readPool?.close()
    }
}

extension PostgresRegistry {
    static let keyCheck = "master-key-check"
    static let keyCheckText = "token-registry master key"

    /// Run once at start-up, before serving: refuses a master key that is not the one the data was sealed with (a
    /// replica must never sign with keys it cannot read), and seals any secret an older version left in clear.
    ///
    /// - Returns: how many secrets were sealed that were in clear.
    /// - Throws: ``RegistryError`` `.permissionDenied` with an operator-facing message on a wrong master key.
    @discardableResult
    public static func prepare(pool: PostgresPool, box: SecretBox) async throws -> Int {
        let db = Database(pool: pool, box: box)
        let check = try box.seal(keyCheckText, context: "server_secrets:" + keyCheck)
        try await db.query(
            "INSERT INTO server_secrets (name, secret) VALUES (\(keyCheck), \(ByteA(Array(check.utf8)))) ON CONFLICT DO NOTHING"
        )
        let stored = try await db.query("SELECT secret FROM server_secrets WHERE name = \(keyCheck)").first.map {
            String(decoding: try $0.require("secret", as: ByteA.self).bytes, as: UTF8.self)
        }
        guard let stored, (try? box.openString(stored, context: "server_secrets:" + keyCheck)) == keyCheckText else {
            throw RegistryError(
                .permissionDenied,
                "the database's secrets were sealed with another master key: start with the SECRETS_KEY (or "
                    + "SECRETS_KEY_FILE) they were written with")
        }
        return try await sealLeftovers(db)
    }

    /// Seals secrets stored in clear by versions before sealing, in one transaction.
    static func sealLeftovers(_ db: Database) async throws -> Int {
        try await db.transaction { c in
            var sealed = 0
            for row in try await c.query(
                "SELECT kid, private_pem FROM signing_keys WHERE private_pem NOT LIKE 'enc1:%'")
            {
                let kid: String = try row.require("kid")
                let value = try db.seal(try row.require("private_pem"), context: PostgresSigningKeyStore.context(kid))
                try await c.query("UPDATE signing_keys SET private_pem = \(value) WHERE kid = \(kid)")
                sealed += 1
            }
            for row in try await c.query("SELECT name, secret FROM server_secrets") {
                let name: String = try row.require("name")
                let bytes = try row.require("secret", as: ByteA.self).bytes
                guard !SecretBox.isSealed(String(decoding: bytes, as: UTF8.self)) else { continue }
                let value = try db.box.seal(bytes, context: PostgresSecretStore.context(name))
                try await c.query("UPDATE server_secrets SET secret = \(ByteA(Array(value.utf8))) WHERE name = \(name)")
                sealed += 1
            }
            for row in try await c.query(
                """
                SELECT project_id, name, secret, previous_secret FROM linked_services
                WHERE secret NOT LIKE 'enc1:%' OR previous_secret NOT LIKE 'enc1:%'
                """)
            {
                let project: String = try row.require("project_id")
                let name: String = try row.require("name")
                let context = PostgresDeletionStore.context(projectID: project, name: name)
                func sealing(_ value: String?) throws -> String? {
                    guard let value else { return nil }
                    return SecretBox.isSealed(value) ? value : try db.seal(value, context: context)
                }
                let secret = try sealing(try row.require("secret"))
                let previous = try sealing(try row.decode("previous_secret"))
                try await c.query(
                    """
                    UPDATE linked_services SET secret = \(secret), previous_secret = \(previous)
                    WHERE project_id = \(project) AND name = \(name)
                    """)
                sealed += 1
            }
            return sealed
        }
    }
}
