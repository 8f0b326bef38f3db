import HTTP
import Registry

/// What a route runs once its principal is resolved: a request and its caller in, a response out; thrown errors are
/// rendered in the route's ``ErrorShape``.
public typealias RouteHandler<Caller> = @Sendable (RequestContext, Caller) async throws -> HTTPResponse

/// How a route's failures are written: each API answers in its own clients' shape.
public enum ErrorShape: Sendable {
    /// Google's `{"error":{"code","message","status"}}` (``APIError``).
    case google
    /// The Instance ID API's `{"error":"<CODE>"}`.
    case iid
    /// The register API's plain-text `Error=<CODE>`.
    case registerText

    /// The answer to `error`.
    func response(_ error: any Error) -> HTTPResponse {
        switch self {
        case .google: return APIError.from(error).response
        case .iid:
            let mapped = APIError.from(error)
            var response =
                mapped.status == 401 ? IIDController.unauthorized() : IIDController.error(mapped.status, mapped.canonical)
            for (name, value) in mapped.headers { response.headers.add(name: name, value: value) }
            return response
        case .registerText: return CheckinController.failure(error)
        }
    }
}

/// One route of the table: where it is, who may call it, and what it runs.
public struct Route: Sendable {
    public let method: String
    public let template: String
    /// Who may call it (``Principal/credentials``).
    public let credentials: [Credential]
    /// Whether pages may call it (it answers CORS preflights; see ``CORS``).
    public let browser: Bool
    /// Whether the event loop answers it in place (``Routes/addImmediate(_:_:_:)``).
    public let immediate: Bool
    let errors: ErrorShape
    /// What a server credential's call writes to the audit log.
    public let audit: Audit?
    /// Runs before the principal: an answer (a 429) stops the request there, before anything is looked up.
    let admit: (@Sendable (RequestContext) -> HTTPResponse?)?
    /// Resolves the principal, then runs the handler with it (and records its audit entry).
    let run: @Sendable (RouteEnvironment, RequestContext) async throws -> HTTPResponse
    /// The handler of an immediate route, which needs no principal and never suspends.
    let runImmediately: (@Sendable (RequestContext) throws -> HTTPResponse)?
}

/// The route table the controllers fill: every route with its principal.
public struct Routes: Sendable {
    private(set) var router = Router<Route>()
    /// The immediate routes, by `"METHOD path"`.
    private(set) var immediateRoutes: [String: Route] = [:]

    public init() {}

    /// Adds a route that `principal` may call; `handler` receives what the principal resolved to.
    ///
    /// - Parameters:
    ///   - browser: pages may call it (the web SDKs' routes).
    ///   - errors: the shape its failures are written in.
    ///   - audit: the entry a server credential's call appends to the audit log, whatever its outcome.
    ///   - admit: runs first, before the principal is resolved: a response stops the request (a rate limit).
    public mutating func add<Caller>(
        _ method: HTTPMethod, _ template: String, _ principal: Principal<Caller>, browser: Bool = false,
        errors: ErrorShape = .google, audit: Audit? = nil, admit: (@Sendable (RequestContext) -> HTTPResponse?)? = nil,
        _ handler: @escaping RouteHandler<Caller>
    ) {
        addResolving(method, template, principal, browser: browser, errors: errors, audit: audit, admit: admit) {
            environment, context, caller in
            guard let audit else { return try await handler(context, caller) }
            return try await environment.audited(audit, caller, context, errors, appended: nil) {
                try await handler(context, caller)
            }
        }
    }

    /// Adds a route whose write appends the call's audit entry itself, in its own statement (``AuditCompanion``): the
    /// handler hands the companion it receives (nil when the call is not audited) to that write. `answer` gives the
    /// error each outcome of the write is answered with (nil: the call succeeds); the entry's outcome for each is
    /// computed from it once, here. An answer that ends other than the entry says (a failure after the write) appends
    /// an entry of its own.
    public mutating func add<Caller, Outcome>(
        _ method: HTTPMethod, _ template: String, _ principal: Principal<Caller>, errors: ErrorShape = .google,
        audit: Audit, appendedBy outcomes: Outcome.Type, answer: (Outcome) -> (any Error)?,
        _ handler: @escaping @Sendable (RequestContext, Caller, AuditCompanion<Outcome>?) async throws -> HTTPResponse
    ) {
        var table: [Outcome: String] = [:]
        for outcome in Outcome.allCases {
            table[outcome] = answer(outcome).map { Audit.outcome(errors.response($0).status) } ?? Audit.outcome(200)
        }
        let auditOutcomes = table
        addResolving(method, template, principal, browser: false, errors: errors, audit: audit, admit: nil) {
            environment, context, caller in
            let companion = environment.companion(audit, caller, context, outcomes: auditOutcomes)
            return try await environment.audited(
                audit, caller, context, errors, appended: { companion?.appendedOutcome }
            ) { try await handler(context, caller, companion) }
        }
    }

    /// A route that resolves `principal`, then runs `run` with the caller.
    private mutating func addResolving<Caller>(
        _ method: HTTPMethod, _ template: String, _ principal: Principal<Caller>, browser: Bool, errors: ErrorShape,
        audit: Audit?, admit: (@Sendable (RequestContext) -> HTTPResponse?)?,
        _ run: @escaping @Sendable (RouteEnvironment, RequestContext, Caller) async throws -> HTTPResponse
    ) {
        precondition(!principal.credentials.isEmpty, "a route declares who may call it: \(method) \(template)")
        router.add(
            method.rawValue, template,
            Route(
                method: method.rawValue, template: template, credentials: principal.credentials, browser: browser,
                immediate: false, errors: errors, audit: audit, admit: admit,
                run: { environment, context in
                    let caller = try await principal.resolve(environment.auth, context)
                    // From here the request works for the caller's project: its connections count against its share.
                    guard let tenant = (caller as? any ProjectCaller)?.tenant else {
                        return try await run(environment, context, caller)
                    }
                    var response = try await Tenant.$current.withValue(tenant) {
                        try await run(environment, context, caller)
                    }
                    // A streamed body (an export) runs after the handler returns: it works for the project too.
                    if let body = response.stream {
                        response.stream = ResponseBody { writer in
                            try await Tenant.$current.withValue(tenant) { try await body.produce(writer) }
                        }
                    }
                    return response
                },
                runImmediately: nil))
    }

    /// Adds a route anyone may call, at a literal path, whose answer needs no suspension (no database, no await): the
    /// event loop answers a request for that path (and a HEAD of it) in place, with no task (``HTTPImmediateHandler``).
    /// It is in the router too, so the route table, CORS and the 405 for its other methods see it as any route.
    public mutating func addImmediate(
        _ method: HTTPMethod, _ path: String, _ handler: @escaping @Sendable (RequestContext) throws -> HTTPResponse
    ) {
        precondition(!path.contains("{"), "an immediate route's path is literal: \(path)")
        let route = Route(
            method: method.rawValue, template: path, credentials: [.anyone], browser: false, immediate: true,
            errors: .google, audit: nil, admit: nil, run: { _, context in try handler(context) },
            runImmediately: handler)
        router.add(method.rawValue, path, route)
        immediateRoutes["\(method.rawValue) \(path)"] = route
    }

    /// Every route, in registration order.
    public var all: [Route] { router.handlersInOrder }
}
