import Foundation

/// What one round of the jobs did.
public struct JobReport: Sendable, Equatable {
    /// What each job processed, by job name.
    public var processed: [String: Int] = [:]
    /// Jobs not run this round, and why.
    public var skipped: [String: String] = [:]
    /// This replica's clock minus the database's, when the jobs run on the database's time.
    public var clockSkewSeconds: Double?
    /// Units (a delivery, an installation to expire) that failed, by job: each recorded on its own row where the
    /// store could be reached, while the job went on with the others.
    public var unitFailures: [String: Int] = [:]
    /// Jobs that failed as a whole this round, and why; the jobs after them still ran.
    public var failed: [String: String] = [:]
    /// The audit chains' heads this round moved (the jobs loop logs each: a witness outside the database).
    public var auditHeads: [AuditHead] = []
}

/// The background jobs, one file each. Every replica runs them; each claims its work with row locks, leases or a
/// lock of its own, so replicas never do the same work twice, and a replica that dies mid-job leaves nothing half
/// done (claims are leases; everything else is one transaction). They read the time from ``JobClock``.
public struct Jobs: Sendable {
    public let delivery: DeliveryJob
    public let purge: PurgeJob
    public let expiry: ExpiryJob
    public let registrationExpiry: RegistrationExpiryJob
    public let clock: JobClock
    let feed: any ChangeFeedStore
    let maintenance: any MaintenanceStore
    let checkins: CheckinService?
    let freshness: Freshness
    let feedback: FeedbackService?
    let audit: AuditService?

    public init(
        installations: InstallationService, installationStore: any InstallationStore, deliveries: any DeliveryStore,
        maintenance: any MaintenanceStore, feed: any ChangeFeedStore, transport: any DeliveryTransport,
        policy: DeletionPolicy, freshness: Freshness, time: JobClock.Source, replicaClock: any WallClock = SystemClock(),
        checkins: CheckinService? = nil, feedback: FeedbackService? = nil, audit: AuditService? = nil
    ) {
        let clock = JobClock(time, store: maintenance, replica: replicaClock)
        delivery = DeliveryJob(store: deliveries, transport: transport, policy: policy, clock: clock)
        purge = PurgeJob(store: maintenance, policy: policy, clock: clock)
        expiry = ExpiryJob(installations: installations, store: installationStore, policy: policy, clock: clock)
        registrationExpiry = RegistrationExpiryJob(store: maintenance, freshness: freshness, clock: clock)
        self.clock = clock
        self.feed = feed
        self.maintenance = maintenance
        self.checkins = checkins
        self.freshness = freshness
        self.feedback = feedback
        self.audit = audit
    }

    /// Runs every job once, in dependency order (expiry creates deliveries, deliveries complete deletions, purge
    /// removes what is complete, the relay publishes what all of them recorded). While this replica's clock is
    /// more than ``JobClock/maxSkew`` seconds off the database's, the destructive jobs (expiry, purge) wait.
    ///
    /// A job that fails is reported in ``JobReport/failed`` and the next one runs anyway: the purge (the 180-day
    /// promise) never waits on the deliveries, whatever happened to them.
    ///
    /// - Throws: only when the database's time cannot be read (nothing can run then).
    public func run() async throws -> JobReport {
        var report = JobReport()
        report.clockSkewSeconds = try await clock.skew()
        let destructive = report.clockSkewSeconds.map { abs($0) <= JobClock.maxSkew } ?? true
        let skew = report.clockSkewSeconds.flatMap { ClientNumbers.integer($0.rounded(), in: -(1 << 52)...(1 << 52)) }
        let reason = "this replica's clock is \(skew ?? 0) s off the database's"
        func step(_ job: String, runs: Bool = true, _ body: () async throws -> (processed: Int, failed: Int)) async {
            guard runs else {
                report.skipped[job] = reason
                return
            }
            do {
                let outcome = try await timed(job, body)
                report.processed[job] = outcome.processed
                if outcome.failed > 0 { report.unitFailures[job] = outcome.failed }
            } catch {
                report.failed[job] = String(describing: error)
            }
        }
        await step("expire", runs: destructive) { try await expiry.runReporting() }
        await step("expire-registrations") { (try await registrationExpiry.run(), 0) }
        await step("deliver") {
            let outcome = try await delivery.drain()
            return (outcome.attempted, outcome.failed)
        }
        await step("purge", runs: destructive) { (try await purge.run(), 0) }
        if let checkins {
            await step("purge-checkins", runs: destructive) { (try await checkins.purgeUnused(now: try await clock.now()), 0) }
        }
        if let feedback {
            await step("purge-retired", runs: destructive) { (try await feedback.purge(now: try await clock.now()), 0) }
        }
        if let audit {
            await step("audit-chain") {
                let heads = try await audit.chain()
                report.auditHeads = heads
                return (heads.reduce(0) { $0 + $1.chained }, 0)
            }
            await step("audit-purge", runs: destructive) { (try await audit.purge(now: try await clock.now()), 0) }
        }
        await step("relay") { (try await relayEvents(), 0) }
        return report
    }

    /// Runs every job once (see ``run()``).
    ///
    /// - Returns: what each job processed, by job name.
    /// - Throws: the first job's failure, once every job had its turn.
    @discardableResult
    public func runAll() async throws -> [String: Int] {
        let report = try await run()
        if let (job, error) = report.failed.sorted(by: { $0.key < $1.key }).first {
            throw RegistryError(.internal, "job \(job) failed: \(error)")
        }
        return report.processed
    }

    private func timed(_ job: String, _ body: () async throws -> (processed: Int, failed: Int)) async throws -> (
        processed: Int, failed: Int
    ) {
        let started = ContinuousClock.now
        let outcome = try await body()
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        try await maintenance.recordRun(
            job: job, at: try await clock.now(), durationSeconds: seconds, processed: outcome.processed)
        return outcome
    }

    // Each job on its own, for tests and `jobs run`.

    public func deliverDue(batch: Int = 50) async throws -> Int { try await delivery.run(batch: batch) }
    public func expireIdle() async throws -> Int { try await expiry.run() }
    public func reportExpiredRegistrations() async throws -> Int { try await registrationExpiry.run() }
    /// Moves events of finished transactions into the change feed, `batch` at a time until fewer are left (at most
    /// `maxBatches` batches a run; the next run goes on).
    public func relayEvents(batch: Int = 5_000, maxBatches: Int = 40) async throws -> Int {
        var total = 0
        for _ in 0..<maxBatches {
            let moved = try await feed.relay(limit: batch)
            total += moved
            if moved < batch { break }
        }
        return total
    }

    /// The deletion and job gauges, read from the store so every replica reports the same.
    public func gauges() async throws -> RegistryGauges { try await maintenance.gauges(at: try await clock.now()) }

    /// Registrations by freshness (see ``MaintenanceStore/registrationCounts(staleBefore:expiredBefore:)``).
    public func registrationCounts() async throws -> [String: Int] {
        let now = try await clock.now()
        return try await maintenance.registrationCounts(
            staleBefore: now.addingTimeInterval(-freshness.staleAfter),
            expiredBefore: now.addingTimeInterval(-freshness.expireAfter))
    }
}
