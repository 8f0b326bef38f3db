import HTTP

/// What a route runs: a request in, a response out; thrown errors become Google-style JSON via ``APIError``.
public typealias RouteHandler = @Sendable (RequestContext) async throws -> HTTPResponse

/// The route table the controllers fill.
public struct Routes: Sendable {
    public private(set) var router = Router<RouteHandler>()
    /// `"METHOD template"` of the routes browsers call (they answer CORS preflights; see ``CORS``).
    public private(set) var browserRoutes: Set<String> = []

    /// Adds a route; `browser` marks one the web SDKs call from pages.
    public mutating func add(
        _ method: HTTPMethod, _ template: String, browser: Bool = false, _ handler: @escaping RouteHandler
    ) {
        router.add(method.rawValue, template, handler)
        if browser { browserRoutes.insert("\(method.rawValue) \(template)") }
    }
}
