import Foundation

/// What one round of the jobs did.
public struct JobReport: Sendable, Equatable {
    /// What each job processed, by job name.
    public var processed: [String: Int] = [:]
    /// Jobs not run this round, and why.
    public var skipped: [String: String] = [:]
    /// This replica's clock minus the database's, when the jobs run on the database's time.
    public var clockSkewSeconds: Double?
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

    public init(
        installations: InstallationService, installationStore: any InstallationStore, deliveries: any DeliveryStore,
        maintenance: any MaintenanceStore, feed: any ChangeFeedStore, transport: any DeliveryTransport,
        policy: DeletionPolicy, freshness: Freshness, time: JobClock.Source, replicaClock: any Clock = SystemClock()
    ) {
        let clock = JobClock(time, store: maintenance, replica: replicaClock)
        delivery = DeliveryJob(store: deliveries, transport: transport, policy: policy, clock: clock)
        purge = PurgeJob(store: maintenance, policy: policy, clock: clock)
        expiry = ExpiryJob(installations: installations, store: installationStore, policy: policy, clock: clock)
        registrationExpiry = RegistrationExpiryJob(store: maintenance, freshness: freshness, clock: clock)
        self.clock = clock
        self.feed = feed
        self.maintenance = maintenance
    }

    /// Runs every job once, in dependency order (expiry creates deliveries, deliveries complete deletions, purge
    /// removes what is complete, the relay publishes what all of them recorded). While this replica's clock is
    /// more than ``JobClock/maxSkew`` seconds off the database's, the destructive jobs (expiry, purge) wait.
    public func run() async throws -> JobReport {
        var report = JobReport()
        report.clockSkewSeconds = try await clock.skew()
        let destructive = report.clockSkewSeconds.map { abs($0) <= JobClock.maxSkew } ?? true
        let reason = "this replica's clock is \(Int(report.clockSkewSeconds ?? 0)) s off the database's"
        if destructive {
            report.processed["expire"] = try await timed("expire") { try await expiry.run() }
        } else {
            report.skipped["expire"] = reason
        }
        report.processed["expire-registrations"] = try await timed("expire-registrations") {
            try await registrationExpiry.run()
        }
        report.processed["deliver"] = try await timed("deliver") { try await delivery.drain() }
        if destructive {
            report.processed["purge"] = try await timed("purge") { try await purge.run() }
        } else {
            report.skipped["purge"] = reason
        }
        report.processed["relay"] = try await timed("relay") { try await relayEvents() }
        return report
    }

    /// Runs every job once (see ``run()``).
    ///
    /// - Returns: what each job processed, by job name.
    @discardableResult
    public func runAll() async throws -> [String: Int] { try await run().processed }

    private func timed(_ job: String, _ body: () async throws -> Int) async throws -> Int {
        let started = ContinuousClock.now
        let processed = try await body()
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        try await maintenance.recordRun(
            job: job, at: try await clock.now(), durationSeconds: seconds, processed: processed)
        return processed
    }

    // Each job on its own, for tests and `jobs run`.

    public func deliverDue(batch: Int = 50) async throws -> Int { try await delivery.run(batch: batch) }
    public func expireIdle() async throws -> Int { try await expiry.run() }
    public func reportExpiredRegistrations() async throws -> Int { try await registrationExpiry.run() }
    /// Moves events of finished transactions into the change feed.
    public func relayEvents() async throws -> Int { try await feed.relay() }

    /// The deletion and job gauges, read from the store so every replica reports the same.
    public func gauges() async throws -> RegistryGauges { try await maintenance.gauges(at: try await clock.now()) }
}
