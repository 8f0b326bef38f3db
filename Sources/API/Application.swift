import HTTP
import Registry
import Synchronization

/// The service, composed: the domain's services over a set of stores, the ``Responder`` over them, and the parts
/// that run (``Service``) under one ``ServiceGroup``. Built by ``build(configuration:stores:reads:clock:logger:transport:resolver:pools:)``
/// from a set of stores, so tests build exactly what production runs, on port 0; the composition root chooses the
/// stores (PostgreSQL in production).
///
/// The parts, in the order they start (and the reverse of the order they stop):
/// 1. the database pools (placed on the HTTP event loops once those run; closed last, once everything that uses
///    them has ended);
/// 2. the background jobs, every `JOBS_INTERVAL_SECONDS` (when asked for), whose stop cancels the round under way;
/// 3. the change-feed relay, every 250 ms (with the jobs);
/// 4. the HTTP server (bound at start; first to stop: readiness is already false, the listener closes and in-flight
///    requests finish until the drain deadline).
public final class Application: Sendable {
    public let configuration: Configuration
    public let services: RegistryServices
    public let logger: Logger
    public let metrics: Metrics
    public let responder: Responder
    let process: ProcessState
    let http: HTTPService
    let pools: PoolsService
    /// The group ``start()`` runs, until ``shutdown()``.
    private let running = Mutex<(group: ServiceGroup, task: Task<Void, any Error>)?>(nil)

    public var catalog: Catalog { services.catalog }
    public var tokens: TokenIssuer { services.tokens }
    public var installations: InstallationService { services.installations }
    public var consent: ConsentService { services.consent }
    public var registrations: RegistrationService { services.registrations }
    public var topics: TopicService { services.topics }
    public var targeting: TargetingService { services.targeting }
    public var deletions: DeletionService { services.deletions }
    public var feedback: FeedbackService { services.feedback }
    public var jobs: Jobs { services.jobs }
    public var clock: any WallClock { services.clock }

    /// Assembles the service on `stores` (already migrated).
    ///
    /// - Parameter pools: puts the stores' database connections on the HTTP event loops once they run (a handler's
    ///   query then runs on the loop that serves its request).
    public static func build(
        configuration: Configuration, stores: RegistryStores, reads: RegistryStores? = nil,
        clock: any WallClock = SystemClock(), logger: Logger? = nil, transport: (any DeliveryTransport)? = nil,
        resolver: any HostResolver = SystemResolver(), pools: @escaping @Sendable ([EventLoop]) -> Void = { _ in }
    ) async throws -> Application {
        // The jobs run on the database's clock, unless the service was given a clock of its own to live by (an
        // operator's `jobs run --now`, a test moving through 180 days).
        let services = try await RegistryServices.make(
            stores: stores, reads: reads, clock: clock,
            freshness: Freshness(staleDays: configuration.staleDays, expireDays: configuration.expireDays),
            policy: configuration.deletionPolicy, feedbackPolicy: configuration.feedbackPolicy,
            userPolicy: configuration.userPolicy, auditRetention: configuration.auditRetentionDays * 86_400,
            transport: transport
                ?? SocketDeliveryTransport(policy: configuration.deletionPolicy.endpoints, resolver: resolver),
            resolver: resolver,
            jobTime: clock is SystemClock ? .database : .explicit(clock))
        return try Application(
            configuration: configuration, services: services, logger: logger ?? Logger(level: configuration.logLevel),
            pools: pools)
    }

    private init(
        configuration: Configuration, services: RegistryServices, logger: Logger,
        pools: @escaping @Sendable ([EventLoop]) -> Void
    ) throws {
        self.configuration = configuration
        self.services = services
        self.logger = logger
        let metrics = Metrics()
        self.metrics = metrics
        let process = ProcessState()
        self.process = process
        let responder = try Responder.service(
            configuration: configuration, services: services, metrics: metrics, logger: logger, process: process)
        self.responder = responder
        let server = HTTPServer(
            configuration: configuration.http,
            errorResponse: { status, message in APIError(status, CanonicalStatus.code(for: status), message).response },
            logger: { [logger] message in logger.warning(message) },
            immediate: { request in responder.respondImmediately(to: request) },
            handler: { request in await responder.respond(to: request) })
        process.server.withLock { $0 = server }
        http = HTTPService(server: server)
        self.pools = PoolsService(http: http, place: pools, close: { [health = services.health] in health.close() })
    }

    /// Every route the service answers, with who may call it.
    public var routeTable: [Route] { responder.table }

    /// The parts to run, in order; the jobs and the relay only when `jobs` (every replica may run them: they claim
    /// their work with row locks or advisory locks).
    ///
    /// The server is last, so it is the first to stop: in-flight requests get the whole drain, and the jobs, which
    /// stop after it, never take their time from it. The pools are first, so they close last.
    func parts(jobs: Bool) -> [any Service] {
        var parts: [any Service] = [pools]
        if jobs && configuration.jobsIntervalSeconds > 0 {
            parts.append(
                RepeatingService.jobs(
                    services.jobs, every: .milliseconds(Int64(configuration.jobsIntervalSeconds * 1000)),
                    metrics: metrics, logger: logger))
            parts.append(RepeatingService.relay(services.jobs))
        }
        parts.append(http)
        return parts
    }

    /// A group of the parts, whose shutdown first turns readiness false.
    func group(jobs: Bool) -> ServiceGroup {
        ServiceGroup(
            parts(jobs: jobs), drain: .milliseconds(Int64(configuration.drainTimeoutSeconds * 1000)), logger: logger,
            whenStopping: { [process] in process.draining.store(true, ordering: .relaxed) })
    }

    /// Runs the service in the calling task until `stop` yields twice or finishes (the first yield stops it
    /// gracefully, the second by force): the composition root's signals.
    ///
    /// - Parameter serving: called once every part has started, with the bound port.
    public func run(
        jobs: Bool = true, until stop: AsyncStream<Int32>, serving: @Sendable (Int) -> Void = { _ in }
    ) async throws {
        let group = group(jobs: jobs)
        try await withThrowingTaskGroup(of: Bool.self) { tasks in
            tasks.addTask {
                try await group.run()
                return true
            }
            tasks.addTask {
                for await number in stop {
                    self.logger.info("signal received; draining", [("signal", .int(number))])
                    group.shutdown()
                }
                group.shutdown()
                return false
            }
            if await group.waitUntilStarted() {
                serving(http.server.port)
                logger.info("listening", [("host", .string(configuration.http.host)), ("port", .int(http.server.port))])
            }
            while let groupEnded = try await tasks.next() {
                if groupEnded { break }
            }
            tasks.cancelAll()
        }
        logger.info("stopped")  // written through: every request line gathered before it goes out first
        logger.close()
    }

    /// Starts the service without its jobs, for tests and one-off commands, and returns the bound port; it runs in a
    /// task of its own until ``shutdown()``.
    @discardableResult
    public func start() async throws -> Int {
        let group = group(jobs: false)
        let task = Task { try await group.run() }
        running.withLock { $0 = (group, task) }
        guard await group.waitUntilStarted() else {
            try await task.value
            throw CancellationError()
        }
        return http.server.port
    }

    /// Stops what ``start()`` started, as a first signal does, and waits until it has.
    public func shutdown() async {
        if let (group, task) = running.withLock({ $0 }) {
            group.shutdown()
            _ = try? await task.value
        } else {
            await pools.stop(deadline: .now)
        }
        logger.info("stopped")
        logger.close()
    }

    public var isDraining: Bool { process.isDraining }
}
