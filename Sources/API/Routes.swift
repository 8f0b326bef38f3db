import HTTP

/// What a route runs: a request in, a response out; thrown errors become Google-style JSON via ``APIError``.
public typealias RouteHandler = @Sendable (RequestContext) async throws -> HTTPResponse

/// The route table the controllers fill.
public struct Routes: Sendable {
    public private(set) var router = Router<RouteHandler>()

    public mutating func add(_ method: HTTPMethod, _ template: String, _ handler: @escaping RouteHandler) {
        router.add(method.rawValue, template, handler)
    }
}
