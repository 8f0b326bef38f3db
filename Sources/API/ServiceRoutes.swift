import HTTP
import Registry
import Synchronization

/// What the ops routes read of the running process: whether it drains, and the HTTP server's own gauges.
final class ProcessState: Sendable {
    let draining = Atomic<Bool>(false)
    let server = Mutex<HTTPServer?>(nil)

    var isDraining: Bool { draining.load(ordering: .relaxed) }

    func serverGauges() -> [String] {
        guard let server = server.withLock({ $0 }) else { return [] }
        return PrometheusText.serverGauges(
            open: server.openConnections, inFlight: server.inFlightRequests, refused: server.refusedConnections,
            pendingOutput: server.pendingOutputBytes, reservedInput: server.reservedInputBytes,
            writeTimeouts: server.writeTimeouts,
            protocolErrors: server.protocolErrors)
    }
}

extension Responder {
    /// Every route of the service, each with its principal, over `services`.
    static func service(
        configuration: Configuration, services s: RegistryServices, metrics: Metrics, logger: Logger,
        process: ProcessState
    ) throws -> Responder {
        var routes = Routes()
        let limits = InstallationsController.CreateLimits(
            perKey: RateLimiter(
                ratePerSecond: configuration.createRatePerKey, burst: configuration.createRatePerKey * 2),
            perAddress: RateLimiter(
                ratePerSecond: configuration.createRatePerAddress, burst: configuration.createRatePerAddress * 2),
            trustedProxyHops: configuration.trustedProxyHops)
        InstallationsController(installations: s.installations, catalog: s.catalog, createLimits: limits)
            .register(&routes)
        ConsentController(
            installations: s.installations, consent: s.consent,
            perInstallation: RateLimiter(
                ratePerSecond: configuration.consentRatePerHour / 3600, burst: Configuration.consentBurst)
        ).register(&routes)
        RegistrationsController(registrations: s.registrations, targeting: s.targeting).register(&routes)
        TopicsController(registrations: s.registrations, topics: s.topics, targeting: s.targeting).register(&routes)
        IIDController(
            catalog: s.catalog, registrations: s.registrations, topics: s.topics, installations: s.installations
        )
        .register(&routes)
        DeletionsController(deletions: s.deletions, feed: s.feed).register(&routes)
        FeedbackController(feedback: s.feedback, metrics: metrics).register(&routes)
        UsersController(
            users: s.users, erasures: s.erasures, installations: s.installations, registrations: s.registrations,
            consent: s.consent, freshness: s.targeting.freshness
        ).register(&routes)
        ExportController(exports: s.exports, users: s.users, imports: s.imports, clock: s.clock).register(&routes)
        AuditController(audit: s.audit).register(&routes)
        TokenController(serviceAccounts: s.serviceAccounts).register(&routes)
        CheckinController(
            catalog: s.catalog, checkins: s.checkins, installations: s.installations, registrations: s.registrations,
            topics: s.topics,
            perAddress: RateLimiter(
                ratePerSecond: configuration.checkinRatePerAddress, burst: configuration.checkinRatePerAddress * 2),
            trustedProxyHops: configuration.trustedProxyHops
        ).register(&routes)
        OpsController(
            health: s.health, tokens: s.tokens, metrics: metrics, jobs: s.jobs, gauges: GaugeCache(),
            draining: { process.isDraining }, serverGauges: { process.serverGauges() }
        ).register(&routes)
        let auth = Authenticator(
            catalog: s.catalog, installations: s.installations, serviceAccounts: s.serviceAccounts,
            deletions: s.deletions, checkins: s.checkins, metricsToken: configuration.metricsToken)
        let actions = Set(routes.all.compactMap { $0.audit?.action })
        if let unknown = configuration.auditSkippedActions.subtracting(actions).sorted().first {
            throw ConfigurationError(
                variable: "AUDIT_SKIP_ACTIONS",
                problem: "no route records '\(unknown)'; the audited actions are \(actions.sorted().joined(separator: ", "))")
        }
        return Responder(
            routes: routes, auth: auth, audit: s.audit, skippedAudit: configuration.auditSkippedActions,
            metrics: metrics, logger: logger)
    }
}
