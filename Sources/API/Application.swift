import Crypto
import Foundation
import HTTP
import JSON
import Postgres
import Registry
import Synchronization

/// The service: database pool, domain services, routes and the HTTP server, built by one function so tests
/// build exactly what production runs, on port 0.
public final class Application: Sendable {
    public let configuration: Configuration
    public let pool: PostgresPool
    public let catalog: Catalog
    public let installations: InstallationService
    public let consent: ConsentService
    public let tokens: TokenIssuer
    public let registrations: RegistrationService
    public let targeting: TargetingService
    public let deletions: DeletionService
    public let jobs: Jobs
    public let clock: any Clock
    public let logger: Logger
    public let metrics = Metrics()
    let routes: Routes
    private let draining = Atomic<Bool>(false)
    private let server = Mutex<HTTPServer?>(nil)
    private let background = Mutex<[Task<Void, Never>]>([])

    /// Connects to `conninfo` (migrated already) and assembles the service.
    public static func build(
        configuration: Configuration, conninfo: String, clock: any Clock = SystemClock(),
        logger: Logger? = nil,
        transport: any DeliveryTransport = URLSessionDeliveryTransport()
    ) async throws -> Application {
        let pool = PostgresPool(.init(conninfo: conninfo, maxConnections: configuration.databasePoolSize))
        let tokens = TokenIssuer(pool: pool, clock: clock)
        try await tokens.reload()
        let fidKey = try await ServerSecrets.load("fid-hmac", pool: pool)
        return Application(
            configuration: configuration, pool: pool, tokens: tokens, fidKey: fidKey, clock: clock,
            logger: logger ?? Logger(level: configuration.logLevel), transport: transport)
    }

    private init(
        configuration: Configuration, pool: PostgresPool, tokens: TokenIssuer, fidKey: [UInt8], clock: any Clock,
        logger: Logger, transport: any DeliveryTransport
    ) {
        self.configuration = configuration
        self.pool = pool
        self.tokens = tokens
        self.clock = clock
        self.logger = logger
        catalog = Catalog(store: PostgresCatalogStore(pool: pool))
        installations = InstallationService(
            store: PostgresInstallationStore(pool: pool), tokens: tokens, clock: clock, fidKey: fidKey)
        consent = ConsentService(store: PostgresConsentStore(pool: pool), clock: clock)
        registrations = RegistrationService(
            registrations: PostgresRegistrationStore(pool: pool), topics: PostgresTopicStore(pool: pool),
            consent: consent, installations: installations, clock: clock)
        targeting = TargetingService(
            pool: pool, clock: clock,
            freshness: Freshness(staleDays: configuration.staleDays, expireDays: configuration.expireDays))
        deletions = DeletionService(pool: pool, clock: clock, policy: configuration.deletionPolicy, fidKey: fidKey)
        jobs = Jobs(
            pool: pool, deletions: deletions, installations: installations, transport: transport,
            freshness: targeting.freshness)
        routes = Application.makeRoutes(
            configuration: configuration, catalog: catalog, installations: installations, consent: consent,
            registrations: registrations, targeting: targeting, deletions: deletions, jobs: jobs, clock: clock)
    }

    private static func makeRoutes(
        configuration: Configuration, catalog: Catalog, installations: InstallationService,
        consent: ConsentService, registrations: RegistrationService, targeting: TargetingService,
        deletions: DeletionService, jobs: Jobs, clock: any Clock
    ) -> Routes {
        var routes = Routes()
        let auth = Authenticator(catalog: catalog, installations: installations)
        let limits = InstallationsController.CreateLimits(
            perKey: RateLimiter(
                ratePerSecond: configuration.createRatePerKey, burst: configuration.createRatePerKey * 2),
            perAddress: RateLimiter(
                ratePerSecond: configuration.createRatePerAddress, burst: configuration.createRatePerAddress * 2),
            trustForwardedFor: configuration.trustForwardedFor)
        InstallationsController(auth: auth, installations: installations, catalog: catalog, createLimits: limits)
            .register(&routes)
        ConsentController(auth: auth, installations: installations, consent: consent).register(&routes)
        RegistrationsController(auth: auth, registrations: registrations, targeting: targeting).register(&routes)
        TopicsController(auth: auth, registrations: registrations, targeting: targeting, clock: clock).register(&routes)
        IIDController(
            auth: auth, catalog: catalog, registrations: registrations, installations: installations, clock: clock
        )
        .register(&routes)
        DeletionsController(auth: auth, deletions: deletions, jobs: jobs).register(&routes)
        return routes
    }

    /// Adds the ops routes, which need the running server's gauges.
    private func opsRoutes() -> Routes {
        var routes = self.routes
        OpsController(
            pool: pool, migrator: Schema.migrator, tokens: tokens, metrics: metrics, jobs: jobs,
            draining: { [weak self] in self?.draining.load(ordering: .relaxed) ?? true },
            serverGauges: { [weak self] in self?.serverGauges() ?? [] }
        ).register(&routes)
        return routes
    }

    /// Every route the service answers, as (method, template), ops routes included.
    public var routeTable: [(method: String, template: String)] { opsRoutes().router.registered }

    private func serverGauges() -> [String] {
        guard let server = server.withLock({ $0 }) else { return [] }
        var lines = [
            "# HELP http_open_connections Client connections open now.", "# TYPE http_open_connections gauge",
            "http_open_connections \(server.openConnections)",
            "# HELP http_in_flight_requests Requests being handled now.", "# TYPE http_in_flight_requests gauge",
            "http_in_flight_requests \(server.inFlightRequests)",
            "# HELP http_refused_connections_total Connections refused at the connection limit.",
            "# TYPE http_refused_connections_total counter",
            "http_refused_connections_total \(server.refusedConnections)",
            "# HELP http_protocol_errors_total Requests rejected by the HTTP parser, by status.",
            "# TYPE http_protocol_errors_total counter",
        ]
        for (status, count) in server.protocolErrors.sorted(by: { $0.key < $1.key }) {
            lines.append("http_protocol_errors_total{status=\"\(status)\"} \(count)")
        }
        return lines
    }

    // MARK: - Running

    /// Starts listening.
    ///
    /// - Returns: the bound port.
    @discardableResult
    public func start() throws -> Int {
        let table = opsRoutes().router
        let http = HTTPServer(
            configuration: configuration.http,
            errorResponse: { status, message in
                APIError(status, Application.canonical(status), message).response
            }, logger: { [logger] message in logger.warning(message) }
        ) { [weak self] request in
            guard let self else { return APIError(503, "UNAVAILABLE", "shutting down").response }
            return await self.handle(request, router: table)
        }
        let port = try http.start()
        server.withLock { $0 = http }
        logger.info("listening", [("host", .string(configuration.http.host)), ("port", .int(port))])
        return port
    }

    /// Runs the background jobs every `interval` seconds and the change-feed relay every 250 ms, until
    /// ``shutdown()``. Every replica may run this: jobs claim their work with row locks or advisory locks.
    public func startJobs() {
        let interval = configuration.jobsIntervalSeconds
        guard interval > 0 else { return }
        let jobs = self.jobs
        let logger = self.logger
        let scheduler = Task {
            while !Task.isCancelled {
                do { try await jobs.runAll() } catch {
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

    /// Readiness turns false, listeners close, in-flight requests finish, then the pool closes.
    public func shutdown() async {
        draining.store(true, ordering: .relaxed)
        for task in background.withLock({ $0 }) { task.cancel() }
        if let http = server.withLock({ $0 }) {
            await http.shutdown(drainTimeout: configuration.drainTimeoutSeconds)
        }
        pool.close()
        logger.info("stopped")
    }

    public var isDraining: Bool { draining.load(ordering: .relaxed) }

    // MARK: - Request path

    func handle(_ request: HTTPRequest, router: Router<RouteHandler>) async -> HTTPResponse {
        let started = ContinuousClock.now
        let requestID = Application.requestID(request.headers["x-request-id"])
        var response: HTTPResponse
        var template = "unmatched"
        switch router.match(method: request.method, path: request.path) {
        case let .found(handler, parameters, matched):
            template = matched
            let context = RequestContext(
                request: request, parameters: parameters, requestID: requestID, template: matched)
            do {
                response = try await handler(context)
            } catch {
                let apiError = APIError.from(error)
                if apiError.status >= 500 {
                    logger.error(
                        "request failed",
                        [
                            ("requestId", .string(requestID)), ("route", .string(matched)),
                            ("error", .string(String(describing: error))),
                        ])
                }
                response = apiError.response
            }
        case let .methodNotAllowed(allowed):
            var error = APIError(
                405, "INVALID_ARGUMENT",
                "method \(request.method) is not allowed here; allowed: \(allowed.joined(separator: ", "))")
            error.headers.add(name: "allow", value: allowed.joined(separator: ", "))
            response = error.response
        case .notFound:
            response = APIError.notFound("no route for \(request.method) \(request.path.prefix(200))").response
        case let .badPath(reason):
            response = APIError.invalid(reason).response
        }
        response.headers.add(name: "x-request-id", value: requestID)
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        metrics.observe(method: request.method, route: template, status: response.status, seconds: seconds)
        if logger.level <= .info {
            logger.info(
                "request",
                [
                    ("requestId", .string(requestID)), ("method", .string(request.method)),
                    ("route", .string(template)),
                    ("status", .int(response.status)), ("durationMs", .number(String(format: "%.3f", seconds * 1000))),
                ])
        }
        return response
    }

    /// Uses the caller's `X-Request-Id` when it is a short token, else makes one.
    static func requestID(_ given: String?) -> String {
        if let given, (1...64).contains(given.utf8.count),
            given.utf8.allSatisfy({
                Identifiers.isPlainText(String(UnicodeScalar($0)), limit: 1) && $0 != 0x20 && $0 < 0x80
            })
        {
            return given
        }
        return Hex.encode((try? SecureRandom.bytes(8)) ?? [])
    }

    static func canonical(_ status: Int) -> String {
        switch status {
        case 400, 405, 411, 414, 415, 417, 431, 505: return "INVALID_ARGUMENT"
        case 408: return "DEADLINE_EXCEEDED"
        case 413: return "OUT_OF_RANGE"
        case 503: return "UNAVAILABLE"
        default: return "UNKNOWN"
        }
    }
}
