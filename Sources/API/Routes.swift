import HTTP

/// What a route runs: a request in, a response out; thrown errors become Google-style JSON via ``APIError``.
public typealias RouteHandler = @Sendable (RequestContext) async throws -> HTTPResponse

/// What a route that never suspends runs (no database, no await); see ``Routes/addImmediate(_:_:_:)``.
public typealias ImmediateRouteHandler = @Sendable (RequestContext) throws -> HTTPResponse

/// The route table the controllers fill.
public struct Routes: Sendable {
    public private(set) var router = Router<RouteHandler>()
    /// `"METHOD template"` of the routes browsers call (they answer CORS preflights; see ``CORS``).
    public private(set) var browserRoutes: Set<String> = []
    /// The routes answered on the event loop, by method and literal path.
    public private(set) var immediateRoutes: [(method: String, path: String, handler: ImmediateRouteHandler)] = []

    /// Adds a route; `browser` marks one the web SDKs call from pages.
    public mutating func add(
        _ method: HTTPMethod, _ template: String, browser: Bool = false, _ handler: @escaping RouteHandler
    ) {
        router.add(method.rawValue, template, handler)
        if browser { browserRoutes.insert("\(method.rawValue) \(template)") }
    }

    /// Adds a route, at a literal path, whose answer needs no suspension (no database, no await): the event loop
    /// answers a request for that path (and a HEAD of it) in place, with no task (``HTTPImmediateHandler``). It is in
    /// the router too, so the route table, CORS and the 405 for its other methods see it as any route.
    public mutating func addImmediate(_ method: HTTPMethod, _ path: String, _ handler: @escaping ImmediateRouteHandler)
    {
        precondition(!path.contains("{"), "an immediate route's path is literal: \(path)")
        router.add(method.rawValue, path) { try handler($0) }
        immediateRoutes.append((method.rawValue, path, handler))
    }
}
