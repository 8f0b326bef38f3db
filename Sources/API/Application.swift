import Crypto
import Foundation
import HTTP
import JSON
import Registry
import Synchronization

/// The service: the domain's services, the routes and the HTTP server. Built by ``build(configuration:stores:clock:logger:transport:)``
/// from a set of stores, so tests build exactly what production runs, on port 0; the composition root chooses the
/// stores (PostgreSQL in production).
public final class Application: Sendable {
    public let configuration: Configuration
    public let services: RegistryServices
    public let logger: Logger
    public let metrics = Metrics()
    let routes: Routes
    let cors: CORS
    let gaugeCache = GaugeCache()
    private let draining = Atomic<Bool>(false)
    private let server = Mutex<HTTPServer?>(nil)
    private let background = Mutex<[Task<Void, Never>]>([])
    private let startHooks = Mutex<[@Sendable ([EventLoop]) -> Void]>([])

    public var catalog: Catalog { services.catalog }
    public var tokens: TokenIssuer { services.tokens }
    public var installations: InstallationService { services.installations }
    public var consent: ConsentService { services.consent }
    public var registrations: RegistrationService { services.registrations }
    public var topics: TopicService { services.topics }
    public var targeting: TargetingService { services.targeting }
    public var deletions: DeletionService { services.deletions }
    public var jobs: Jobs { services.jobs }
    public var clock: any Clock { services.clock }

    /// Assembles the service on `stores` (already migrated).
    public static func build(
        configuration: Configuration, stores: RegistryStores, reads: RegistryStores? = nil,
        clock: any Clock = SystemClock(),
        logger: Logger? = nil, transport: (any DeliveryTransport)? = nil, resolver: any HostResolver = SystemResolver()
    ) async throws -> Application {
        // The jobs run on the database's clock, unless the service was given a clock of its own to live by (an
        // operator's `jobs run --now`, a test moving through 180 days).
        let services = try await RegistryServices.make(
            stores: stores, reads: reads, clock: clock,
            freshness: Freshness(staleDays: configuration.staleDays, expireDays: configuration.expireDays),
            policy: configuration.deletionPolicy,
            transport: transport
                ?? SocketDeliveryTransport(policy: configuration.deletionPolicy.endpoints, resolver: resolver),
            resolver: resolver,
            jobTime: clock is SystemClock ? .database : .explicit(clock))
        return Application(
            configuration: configuration, services: services, logger: logger ?? Logger(level: configuration.logLevel))
    }

    private init(configuration: Configuration, services: RegistryServices, logger: Logger) {
        self.configuration = configuration
        self.services = services
        self.logger = logger
        routes = Application.makeRoutes(configuration: configuration, services: services)
        cors = CORS(
            catalog: services.catalog, installations: services.installations, browserRoutes: routes.browserRoutes)
    }

    private static func makeRoutes(configuration: Configuration, services s: RegistryServices) -> Routes {
        var routes = Routes()
        let auth = Authenticator(catalog: s.catalog, installations: s.installations, serviceAccounts: s.serviceAccounts)
        let limits = InstallationsController.CreateLimits(
            perKey: RateLimiter(
                ratePerSecond: configuration.createRatePerKey, burst: configuration.createRatePerKey * 2),
            perAddress: RateLimiter(
                ratePerSecond: configuration.createRatePerAddress, burst: configuration.createRatePerAddress * 2),
            trustedProxyHops: configuration.trustedProxyHops)
        InstallationsController(auth: auth, installations: s.installations, catalog: s.catalog, createLimits: limits)
            .register(&routes)
        ConsentController(auth: auth, installations: s.installations, consent: s.consent).register(&routes)
        RegistrationsController(auth: auth, registrations: s.registrations, targeting: s.targeting).register(&routes)
        TopicsController(auth: auth, registrations: s.registrations, topics: s.topics, targeting: s.targeting)
            .register(&routes)
        IIDController(
            auth: auth, catalog: s.catalog, registrations: s.registrations, topics: s.topics,
            installations: s.installations
        )
        .register(&routes)
        DeletionsController(auth: auth, deletions: s.deletions, feed: s.feed).register(&routes)
        TokenController(serviceAccounts: s.serviceAccounts).register(&routes)
        CheckinController(
            catalog: s.catalog, checkins: s.checkins, installations: s.installations, registrations: s.registrations,
            topics: s.topics,
            perAddress: RateLimiter(
                ratePerSecond: configuration.checkinRatePerAddress, burst: configuration.checkinRatePerAddress * 2),
            trustedProxyHops: configuration.trustedProxyHops
        ).register(&routes)
        return routes
    }

    /// Adds the ops routes, which need the running server's gauges.
    private func opsRoutes() -> Routes {
        var routes = self.routes
        OpsController(
            health: services.health, tokens: services.tokens, metrics: metrics, jobs: services.jobs,
            gauges: gaugeCache, metricsToken: configuration.metricsToken,
            draining: { [weak self] in self?.draining.load(ordering: .relaxed) ?? true },
            serverGauges: { [weak self] in self?.serverGauges() ?? [] }
        ).register(&routes)
        return routes
    }

    /// Every route the service answers, as (method, template), ops routes included.
    public var routeTable: [(method: String, template: String)] { opsRoutes().router.registered }

    private func serverGauges() -> [String] {
        guard let server = server.withLock({ $0 }) else { return [] }
        return PrometheusText.serverGauges(
            open: server.openConnections, inFlight: server.inFlightRequests, refused: server.refusedConnections,
            pendingOutput: server.pendingOutputBytes, writeTimeouts: server.writeTimeouts,
            protocolErrors: server.protocolErrors)
    }

    // MARK: - Running

    /// Starts listening.
    ///
    /// - Returns: the bound port.
    @discardableResult
    public func start() throws -> Int {
        let routes = opsRoutes()
        let table = routes.router
        let immediateRoutes = routes.immediateRoutes
        let http = HTTPServer(
            configuration: configuration.http,
            errorResponse: { status, message in
                APIError(status, CanonicalStatus.code(for: status), message).response
            }, logger: { [logger] message in logger.warning(message) },
            immediate: { [weak self] request in self?.immediate(request, routes: immediateRoutes) }
        ) { [weak self] request in
            guard let self else { return APIError(503, "UNAVAILABLE", "shutting down").response }
            return await self.handle(request, router: table)
        }
        let port = try http.start()
        server.withLock { $0 = http }
        for hook in startHooks.withLock({ $0 }) { hook(http.eventLoops) }
        logger.info("listening", [("host", .string(configuration.http.host)), ("port", .int(port))])
        return port
    }

    /// Calls `hook` with the HTTP event loops once ``start()`` has started them: the composition root places the
    /// database connections on them.
    public func onStart(_ hook: @escaping @Sendable ([EventLoop]) -> Void) {
        startHooks.withLock { $0.append(hook) }
    }

    /// Runs the background jobs every `interval` seconds and the change-feed relay every 250 ms, until
    /// ``shutdown()``. Every replica may run this: jobs claim their work with row locks or advisory locks.
    public func startJobs() {
        let interval = configuration.jobsIntervalSeconds
        guard interval > 0 else { return }
        let jobs = services.jobs
        let logger = self.logger
        let scheduler = Task {
            while !Task.isCancelled {
                do {
                    let report = try await jobs.run()
                    metrics.record(report)
                    for (job, error) in report.failed.sorted(by: { $0.key < $1.key }) {
                        logger.warning("job failed", [("job", .string(job)), ("error", .string(String(error.prefix(500))))])
                    }
                    for (job, count) in report.unitFailures.sorted(by: { $0.key < $1.key }) {
                        logger.warning(
                            "job units failed", [("job", .string(job)), ("count", .number(String(count)))])
                    }
                    for (job, reason) in report.skipped.sorted(by: { $0.key < $1.key }) {
                        logger.warning(
                            "job skipped",
                            [
                                ("job", .string(job)), ("reason", .string(reason)),
                                ("clockSkewSeconds", .number(String(format: "%.3f", report.clockSkewSeconds ?? 0))),
                            ])
                    }
                } catch {
                    logger.warning("job run failed", [("error", .string(String(describing: error)))])
                }
                try? await Task.sleep(for: .seconds(interval))
            }
        }
        let relay = Task {
            while !Task.isCancelled {
                _ = try? await jobs.relayEvents()
                try? await Task.sleep(for: .milliseconds(250))
            }
        }
        background.withLock { $0 += [scheduler, relay] }
    }

    /// Readiness turns false, the jobs stop (awaited), listeners close, in-flight requests finish, then the
    /// store's connections close.
    public func shutdown() async {
        draining.store(true, ordering: .relaxed)
        let tasks = background.withLock { tasks in
            defer { tasks = [] }
            return tasks
        }
        for task in tasks { task.cancel() }
        if let http = server.withLock({ $0 }) {
            await http.shutdown(drainTimeout: configuration.drainTimeoutSeconds)
        }
        for task in tasks { await task.value }
        services.health.close()
        logger.info("stopped")  // written through: every request line gathered before it goes out first
        logger.close()
    }

    public var isDraining: Bool { draining.load(ordering: .relaxed) }

    // MARK: - Request path

    func handle(_ request: HTTPRequest, router: Router<RouteHandler>) async -> HTTPResponse {
        let started = ContinuousClock.now
        let requestID = Application.requestID(request.headers["x-request-id"])
        var response: HTTPResponse
        var template = "unmatched"
        if let preflight = await cors.preflight(request, router: router) {
            return finish(preflight, request: request, requestID: requestID, template: "preflight", started: started)
        }
        switch router.match(method: request.method, path: request.path) {
        case let .found(handler, parameters, matched):
            template = matched
            let context = RequestContext(
                request: request, parameters: parameters, requestID: requestID, template: matched)
            do {
                response = try await handler(context)
            } catch {
                response = failed(error, requestID: requestID, template: matched)
            }
            await cors.decorate(&response, request: request, template: matched, parameters: parameters)
        case let .methodNotAllowed(allowed):
            var error = APIError(
                405, CanonicalStatus.code(for: 405),
                "method \(request.method.prefix(32)) is not allowed here; allowed: \(allowed.joined(separator: ", "))")
            error.headers.add(name: "allow", value: allowed.joined(separator: ", "))
            response = error.response
        case .notFound:
            response =
                APIError.notFound("no route for \(request.method.prefix(32)) \(request.path.prefix(200))").response
        case let .badPath(reason):
            // The IID API answers in its own shape, a bad path too.
            response =
                request.path.hasPrefix("/iid/")
                ? IIDController.error(400, "INVALID_ARGUMENT") : APIError.invalid(reason).response
        }
        return finish(response, request: request, requestID: requestID, template: template, started: started)
    }

    /// Answers a request for an immediate route (``Routes/addImmediate(_:_:_:)``) at its exact path; nil for any
    /// other, which goes the usual way (``handle(_:router:)``). Runs on the event loop.
    func immediate(
        _ request: HTTPRequest, routes: [(method: String, path: String, handler: ImmediateRouteHandler)]
    ) -> HTTPResponse? {
        let method = request.method == HTTPMethod.HEAD.rawValue ? HTTPMethod.GET.rawValue : request.method
        guard let route = routes.first(where: { $0.path == request.path && $0.method == method }) else { return nil }
        let started = ContinuousClock.now
        let requestID = Application.requestID(request.headers["x-request-id"])
        let context = RequestContext(request: request, parameters: [:], requestID: requestID, template: route.path)
        let response: HTTPResponse
        do {
            response = try route.handler(context)
        } catch {
            response = failed(error, requestID: requestID, template: route.path)
        }
        return finish(response, request: request, requestID: requestID, template: route.path, started: started)
    }

    /// The answer to a handler's error; a server error (5xx) is logged with its cause.
    private func failed(_ error: any Error, requestID: String, template: String) -> HTTPResponse {
        let apiError = APIError.from(error)
        if apiError.status >= 500 {
            logger.error(
                "request failed",
                [
                    ("requestId", .string(requestID)), ("route", .string(template)),
                    ("error", .string(String(describing: error))),
                ])
        }
        return apiError.response
    }

    /// Stamps the request id, records the metrics and writes the request log line.
    private func finish(
        _ answer: HTTPResponse, request: HTTPRequest, requestID: String, template: String,
        started: ContinuousClock.Instant
    ) -> HTTPResponse {
        var response = answer
        response.headers.add(name: "x-request-id", value: requestID)
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let method = HTTPMethod.label(request.method)
        metrics.observe(method: method, route: template, status: response.status, seconds: seconds)
        logger.request(
            id: requestID, method: method, route: template, status: response.status,
            microseconds: Int(seconds * 1_000_000))
        return response
    }

    /// Uses the caller's `X-Request-Id` when it is a short token of visible ASCII, else makes one.
    static func requestID(_ given: String?) -> String {
        if let given, (1...64).contains(given.utf8.count), given.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) {
            return given
        }
        return RequestIDs.next()
    }
}
