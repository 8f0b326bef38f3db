import HTTP
import JSON
import Registry

/// The route table and the one pipeline every request goes through: request id, CORS, the route's principal, its
/// handler, error mapping, metrics and the request log line. The HTTP server calls it on both of its paths, the task
/// path (``respond(to:)``) and the event loop's immediate path (``respondImmediately(to:)``); tests call it with
/// requests made in memory (no socket).
public struct Responder: Sendable {
    let routes: Routes
    let auth: Authenticator
    let environment: RouteEnvironment
    let cors: CORS
    let metrics: Metrics
    let logger: Logger

    init(
        routes: Routes, auth: Authenticator, audit: AuditService? = nil, skippedAudit: Set<String> = [],
        metrics: Metrics, logger: Logger
    ) {
        self.routes = routes
        self.auth = auth
        environment = RouteEnvironment(auth: auth, audit: audit, skipped: skippedAudit) { error, context in
            metrics.countAuditFailure()
            logger.error(
                "audit entry not written",
                [
                    ("requestId", .string(context.requestID)), ("route", .string(context.template)),
                    ("error", .string(String(describing: error))),
                ])
        }
        self.metrics = metrics
        self.logger = logger
        cors = CORS(catalog: auth.catalog, installations: auth.installations)
    }

    /// Every route the service answers, with who may call it.
    public var table: [Route] { routes.all }

    /// The route a request for `method` and `path` goes to, if any.
    public func route(method: String, path: some StringProtocol) -> Route? {
        if case let .found(route, _, _) = routes.router.match(method: method, path: path) { return route }
        return nil
    }

    /// Answers any request.
    public func respond(to request: HTTPRequest) async -> HTTPResponse {
        let started = ContinuousClock.now
        let requestID = Responder.requestID(request.headers["x-request-id"])
        let trace = TraceContext.of(request.headers["traceparent"])
        if let preflight = await cors.preflight(request, router: routes.router) {
            return finish(
                preflight, request: request, requestID: requestID, trace: trace, template: "preflight", started: started)
        }
        let response: HTTPResponse
        var template = "unmatched"
        switch routes.router.match(method: request.method, path: request.path) {
        case let .found(route, parameters, matched):
            template = matched
            let context = RequestContext(
                request: request, parameters: parameters, requestID: requestID, template: matched, trace: trace)
            var answer: HTTPResponse
            if let refused = route.admit?(context) {
                answer = refused
            } else {
                do {
                    answer = try await route.run(environment, context)
                } catch {
                    answer = failed(error, route: route, requestID: requestID, trace: trace)
                }
            }
            if route.browser, route.method == request.method {
                await cors.decorate(&answer, request: request, parameters: parameters)
            }
            response = answer
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
        return finish(
            response, request: request, requestID: requestID, trace: trace, template: template, started: started)
    }

    /// Answers a request for an immediate route (``Routes/addImmediate(_:_:_:)``) at its exact path, through the same
    /// steps as ``respond(to:)`` (such a route has no principal to resolve and no CORS); nil for any other request,
    /// which goes the task path. Runs on the event loop.
    public func respondImmediately(to request: HTTPRequest) -> HTTPResponse? {
        let method = request.method == HTTPMethod.HEAD.rawValue ? HTTPMethod.GET.rawValue : request.method
        guard let route = routes.immediateRoutes["\(method) \(request.path)"], let handler = route.runImmediately
        else { return nil }
        let started = ContinuousClock.now
        let requestID = Responder.requestID(request.headers["x-request-id"])
        let trace = TraceContext.of(request.headers["traceparent"])
        let context = RequestContext(
            request: request, parameters: [:], requestID: requestID, template: route.template, trace: trace)
        let response: HTTPResponse
        do {
            response = try handler(context)
        } catch {
            response = failed(error, route: route, requestID: requestID, trace: trace)
        }
        return finish(
            response, request: request, requestID: requestID, trace: trace, template: route.template, started: started)
    }

    /// The answer to a route's error, in its shape; a server error (5xx) is logged with its cause.
    private func failed(_ error: any Error, route: Route, requestID: String, trace: TraceContext) -> HTTPResponse {
        let response = route.errors.response(error)
        if response.status >= 500 {
            logger.error(
                "request failed",
                [
                    ("requestId", .string(requestID)), ("traceId", .string(trace.traceID)),
                    ("route", .string(route.template)),
                    ("error", .string(String(describing: error))),
                ])
        }
        return response
    }

    /// Stamps the request id, records the metrics and writes the request log line.
    private func finish(
        _ answer: HTTPResponse, request: HTTPRequest, requestID: String, trace: TraceContext, template: String,
        started: ContinuousClock.Instant
    ) -> HTTPResponse {
        var response = answer
        response.headers.add(name: "x-request-id", value: requestID)
        response.headers.add(name: "traceparent", value: trace.header)
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let method = HTTPMethod.label(request.method)
        metrics.observe(method: method, route: template, status: response.status, seconds: seconds)
        logger.request(
            id: requestID, traceID: trace.traceID, method: method, route: template, status: response.status,
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
