import Foundation

/// The domain's services, wired to one set of stores. Built once by the composition root; unit tests build the
/// same wiring on in-memory stores.
public struct RegistryServices: Sendable {
    public let catalog: Catalog
    public let tokens: TokenIssuer
    public let installations: InstallationService
    public let consent: ConsentService
    public let registrations: RegistrationService
    public let topics: TopicService
    public let targeting: TargetingService
    public let deletions: DeletionService
    public let feed: ChangeFeed
    public let serviceAccounts: ServiceAccountService
    public let checkins: CheckinService
    public let feedback: FeedbackService
    public let users: UserService
    public let erasures: ErasureService
    public let exports: ExportService
    public let audit: AuditService
    public let imports: ImportService
    public let jobs: Jobs
    public let health: any StoreHealth
    public let clock: any WallClock

    /// Wires the services and loads what they need before the first request: the signing keys (the first is made
    /// when there is none) and the FID-hash key.
    ///
    /// - Parameters:
    ///   - reads: the same data on a read replica, for the reads that need not see their own writes: who a topic
    ///     or condition reaches, sendability, deletion receipts and the change feed. Nil: everything on `stores`.
    ///   - jobTime: where the jobs read the time: the database's clock, or an explicit one.
    public static func make(
        stores: RegistryStores, reads: RegistryStores? = nil, clock: any WallClock, freshness: Freshness = Freshness(),
        policy: DeletionPolicy = DeletionPolicy(), feedbackPolicy: FeedbackPolicy = FeedbackPolicy(),
        userPolicy: UserPolicy = UserPolicy(), auditRetention: TimeInterval = 400 * 86_400,
        transport: any DeliveryTransport, resolver: any HostResolver, jobTime: JobClock.Source = .database
    ) async throws -> RegistryServices {
        let tokens = TokenIssuer(store: stores.signingKeys, clock: clock)
        try await tokens.reload()
        let fidHasher = FIDHasher(key: try await stores.secrets.secret(named: "fid-hmac"))
        let serviceAccounts = ServiceAccountService(
            store: stores.serviceAccounts, clock: clock,
            tokenKey: try await stores.secrets.secret(named: "access-token-hmac"))
        return RegistryServices(
            stores: stores, reads: reads ?? stores, tokens: tokens, fidHasher: fidHasher,
            serviceAccounts: serviceAccounts, clock: clock,
            freshness: freshness, policy: policy, feedbackPolicy: feedbackPolicy, userPolicy: userPolicy,
            auditRetention: auditRetention, transport: transport, resolver: resolver, jobTime: jobTime)
    }

    private init(
        stores: RegistryStores, reads: RegistryStores, tokens: TokenIssuer, fidHasher: FIDHasher,
        serviceAccounts: ServiceAccountService,
        clock: any WallClock, freshness: Freshness,
        policy: DeletionPolicy, feedbackPolicy: FeedbackPolicy, userPolicy: UserPolicy, auditRetention: TimeInterval,
        transport: any DeliveryTransport, resolver: any HostResolver, jobTime: JobClock.Source
    ) {
        self.tokens = tokens
        self.serviceAccounts = serviceAccounts
        self.clock = clock
        health = stores.health
        catalog = Catalog(store: stores.catalog)
        installations = InstallationService(
            store: stores.installations, tokens: tokens, clock: clock, fidHasher: fidHasher)
        consent = ConsentService(store: stores.consent, clock: clock)
        registrations = RegistrationService(store: stores.registrations, installations: installations, clock: clock)
        topics = TopicService(store: stores.topics, clock: clock)
        // Targeting reads only: it runs on the read replica when there is one, with services of its own on it.
        let replicaInstallations = InstallationService(
            store: reads.installations, tokens: tokens, clock: clock, fidHasher: fidHasher)
        targeting = TargetingService(
            store: reads.targeting,
            registrations: RegistrationService(
                store: reads.registrations, installations: replicaInstallations, clock: clock),
            installations: replicaInstallations, consent: ConsentService(store: reads.consent, clock: clock),
            clock: clock, freshness: freshness)
        deletions = DeletionService(
            store: stores.deletions, receipts: reads.deletions, clock: clock, policy: policy, fidHasher: fidHasher,
            resolver: resolver)
        feed = ChangeFeed(store: reads.feed)
        checkins = CheckinService(store: stores.checkins, clock: clock)
        feedback = FeedbackService(store: stores.feedback, clock: clock, policy: feedbackPolicy)
        users = UserService(
            store: stores.users, installations: installations, clock: clock, policy: userPolicy, hasher: fidHasher)
        erasures = ErasureService(store: stores.erasures, users: users, clock: clock, fidHasher: fidHasher)
        exports = ExportService(
            subjects: stores.subjects, installations: installations, registrations: registrations, consent: consent,
            topics: topics, users: users, erasures: erasures, deletions: deletions)
        audit = AuditService(store: stores.audit, clock: clock, hasher: fidHasher, retention: auditRetention)
        imports = ImportService(
            store: stores.imports, hasher: fidHasher, users: users, clock: clock, freshness: freshness)
        jobs = Jobs(
            installations: installations, installationStore: stores.installations, deliveries: stores.deliveries,
            maintenance: stores.maintenance, feed: stores.feed, transport: transport, policy: policy,
            freshness: freshness, time: jobTime, replicaClock: clock, checkins: checkins, feedback: feedback,
            audit: audit)
    }
}
