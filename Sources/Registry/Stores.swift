/// Everything the domain needs from storage, as one bundle the composition root fills (with the PostgreSQL
/// stores in production, the in-memory ones in unit tests).
public struct RegistryStores: Sendable {
    public var catalog: any CatalogStore
    public var installations: any InstallationStore
    public var consent: any ConsentStore
    public var registrations: any RegistrationStore
    public var topics: any TopicStore
    public var targeting: any TargetingStore
    public var deletions: any DeletionStore
    public var deliveries: any DeliveryStore
    public var maintenance: any MaintenanceStore
    public var feed: any ChangeFeedStore
    public var signingKeys: any SigningKeyStore
    public var secrets: any SecretStore
    public var serviceAccounts: any ServiceAccountStore
    public var checkins: any CheckinStore
    public var feedback: any FeedbackStore
    public var users: any UserStore
    public var erasures: any ErasureStore
    public var subjects: any SubjectStore
    public var audit: any AuditStore
    public var imports: any ImportStore
    public var health: any StoreHealth

    public init(
        catalog: any CatalogStore, installations: any InstallationStore, consent: any ConsentStore,
        registrations: any RegistrationStore, topics: any TopicStore, targeting: any TargetingStore,
        deletions: any DeletionStore, deliveries: any DeliveryStore, maintenance: any MaintenanceStore,
        feed: any ChangeFeedStore, signingKeys: any SigningKeyStore, secrets: any SecretStore,
        serviceAccounts: any ServiceAccountStore, checkins: any CheckinStore, feedback: any FeedbackStore,
        users: any UserStore, erasures: any ErasureStore, subjects: any SubjectStore, audit: any AuditStore,
        imports: any ImportStore, health: any StoreHealth
    ) {
        self.catalog = catalog
        self.installations = installations
        self.consent = consent
        self.registrations = registrations
        self.topics = topics
        self.targeting = targeting
        self.deletions = deletions
        self.deliveries = deliveries
        self.maintenance = maintenance
        self.feed = feed
        self.signingKeys = signingKeys
        self.secrets = secrets
        self.serviceAccounts = serviceAccounts
        self.checkins = checkins
        self.feedback = feedback
        self.users = users
        self.erasures = erasures
        self.subjects = subjects
        self.audit = audit
        self.imports = imports
        self.health = health
    }
}

/// A store's connections and its batching of writes, for metrics.
public struct StoreStatistics: Sendable, Equatable {
    /// Connections in use and idle, and callers waiting for one.
    public var inUse = 0
    public var idle = 0
    public var waiting = 0
    /// Writes queued for a group commit now; since start, the transactions group commit ran, the writes they
    /// carried (writes ÷ transactions is the mean batch), and writes run again alone after a failure in their batch.
    public var queuedWrites = 0
    public var groupCommits = 0
    public var groupCommittedWrites = 0
    public var writesRetriedAlone = 0
    /// Writes that waited for a lock longer than a batch may, left their batch and ran alone.
    public var writesLockWaitedAlone = 0
    /// Point reads queued for a batch now; since start, the round trips of batched reads and the reads they carried.
    public var queuedReads = 0
    public var readBatches = 0
    public var batchedReads = 0
    /// Reads that waited too long for a batch and ran alone (a batch held up, by a lock say).
    public var readsRunAlone = 0
    /// The read replica's pool (`DATABASE_READ_URL`), when there is one: its connections and its waiting callers.
    public var replica: PoolConnections?

    public init() {}
}

/// A pool's connections in use and idle, and the callers waiting for one.
public struct PoolConnections: Sendable, Equatable {
    public var inUse: Int
    public var idle: Int
    public var waiting: Int

    public init(inUse: Int, idle: Int, waiting: Int) {
        (self.inUse, self.idle, self.waiting) = (inUse, idle, waiting)
    }
}

/// Whether the store can serve, for readiness and metrics.
public protocol StoreHealth: Sendable {
    /// Nil when ready; otherwise why not (unreachable, schema not current).
    func unreadiness() async -> String?
    /// Connections and batched writes, for metrics.
    var statistics: StoreStatistics { get }
    /// Releases the store's connections; called once, at shutdown.
    func close()
}
