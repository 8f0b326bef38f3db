import API
import Foundation
import HTTP
import JSON
import Registry
import Synchronization

/// What an ``InProcessService`` answered, by route: which routes a test reached, and with what.
public final class Exchanges: Sendable {
    private let log = Mutex<[Exchange]>([])

    /// One request answered: its route, status, request id, and whether it carried a server credential (a bearer).
    public struct Exchange: Sendable {
        public let route: String
        public let status: Int
        public let requestID: String
        public let bearer: Bool
    }

    func record(route: String, status: Int, requestID: String = "", bearer: Bool = false) {
        log.withLock { $0.append(Exchange(route: route, status: status, requestID: requestID, bearer: bearer)) }
    }

    /// Every request answered, in order.
    public var all: [Exchange] { log.withLock { $0 } }

    /// `"METHOD template"` of every route answered with `status` in `statuses`.
    public func routes(answered statuses: ClosedRange<Int>) -> Set<String> {
        Set(log.withLock { $0 }.filter { statuses.contains($0.status) }.map(\.route))
    }

    /// Every status each `"METHOD template"` answered.
    public var statuses: [String: Set<Int>] {
        log.withLock { $0 }.reduce(into: [:]) { $0[$1.route, default: []].insert($1.status) }
    }
}

/// The service in memory: the production ``Responder`` over the in-memory stores (``InMemoryStores``), driven by
/// requests made in memory: no socket, no PostgreSQL. Every route, its principal and its error shapes are exercised
/// here in milliseconds; what needs the wire, SQL or real concurrency stays in the live tier (``TestService``).
///
/// It is seeded as ``TestService`` is (a project, a web, iOS and Android app, and a web app whose installations start
/// opted out), and offers the same request helpers, so a test reads the same in either tier.
public struct InProcessService: Sendable {
    public let app: Application
    public let stores: InMemoryStores
    /// Where deletion notices go: answers from a script per endpoint (200 by default), and records what it was sent.
    public let transport: ScriptedTransport
    public let project: Project
    public let serverKey: String
    public let web: App
    public let ios: App
    public let android: App
    public let consentFirst: App
    public var clock: any WallClock { app.clock }
    /// Every request answered, by route.
    public let exchanges = Exchanges()
    /// The address requests come from (per-address limits count it).
    public var remoteAddress = "127.0.0.1:40000"

    /// Runs `body` against a fresh service in memory.
    public static func with(
        configure: (inout Configuration) -> Void = { _ in }, clock: any WallClock = SystemClock(),
        logger: Logger = Logger(level: .error), _ body: (InProcessService) async throws -> Void
    ) async throws {
        var configuration = Configuration(http: .init(host: "127.0.0.1", port: 0, eventLoops: 1))
        configuration.deletionPolicy.endpoints.allowPrivate = true
        configure(&configuration)
        let stores = InMemoryStores(clock: clock)
        let transport = ScriptedTransport()
        let app = try await Application.build(
            configuration: configuration, stores: stores.stores, clock: clock, logger: logger,
            transport: transport, resolver: StaticResolver())
        let seeded = try await SeededProject.make(on: app.catalog, id: "demo-proj", number: 123_456_789_012)
        try await body(
            InProcessService(
                app: app, stores: stores, transport: transport, project: seeded.project, serverKey: seeded.serverKey,
                web: seeded.web, ios: seeded.ios, android: seeded.android, consentFirst: seeded.consentFirst))
    }

    /// Answers one request through the responder, as the server would: the immediate path first, then the task path.
    ///
    /// It never throws (no socket can fail); it is `throws` so that a test reads the same in either tier.
    public func request(_ method: String, _ path: String, headers: [String: String] = [:], body: [UInt8]? = nil)
        async throws -> Reply
    {
        var fields = HTTPHeaders()
        fields.add(name: "host", value: "registry.test")
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { fields.add(name: name.lowercased(), value: value) }
        if let body { fields.add(name: "content-length", value: String(body.count)) }
        var request = HTTPRequest(method: method, target: path, headers: fields, body: body ?? [])
        request.remoteAddress = remoteAddress
        let response: HTTPResponse
        if let immediate = app.responder.respondImmediately(to: request) {
            response = immediate
        } else {
            response = await app.responder.respond(to: request)
        }
        if let route = app.responder.route(method: method, path: request.path) {
            exchanges.record(
                route: "\(route.method) \(route.template)", status: response.status,
                requestID: response.headers["x-request-id"] ?? "",
                bearer: request.headers["authorization"]?.dropping(caseInsensitivePrefix: "bearer ") != nil
                    || request.headers["authorization"]?.dropping(caseInsensitivePrefix: "key=") != nil)
        }
        return Reply(
            raw: RawResponse(
                status: response.status, headers: response.headers.fields,
                body: method == "HEAD" ? [] : (try await response.collectedBody())))
    }

    public func request(_ method: String, _ path: String, headers: [String: String] = [:], json: JSONValue)
        async throws -> Reply
    {
        var all = headers
        if all["Content-Type"] == nil { all["Content-Type"] = "application/json" }
        return try await request(method, path, headers: all, body: json.encoded())
    }

    /// Adds a second project (for isolation tests).
    public func addProject(id: String, number: Int64) async throws -> (project: Project, serverKey: String, app: App) {
        let key = try await app.catalog.createProject(id: id, number: number)
        let project = Project(id: id, number: number)
        let web = try await app.catalog.createApp(project: project, platform: .web, bundleID: nil, autoInitDefault: true)
        return (project, key, web)
    }
}
