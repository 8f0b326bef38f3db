import API
import Crypto
import Foundation
import HTTP
import JSON
import Postgres
import Registry
import RegistryPostgres

/// A live service on port 0 with its own fresh database, a project and apps of each platform, for tests that
/// drive it over real sockets.
public struct TestService: Sendable {
    public let app: Application
    public let port: Int
    public let conninfo: String
    /// The service's own pool, for tests that look at or change rows directly.
    public let pool: PostgresPool
    /// The master key's box this service seals its secrets with (a fresh key per service).
    public let box: SecretBox
    public let project: Project
    public let serverKey: String
    public let web: App
    public let ios: App
    public let android: App
    /// An app whose installations start opted out of messaging.
    public let consentFirst: App

    /// Runs `body` against a fresh service; shuts it down and drops the database afterwards.
    ///
    /// - Parameter logger: the service's logger (default: errors only, to standard output).
    public static func with(
        configure: (inout Configuration) -> Void = { _ in }, clock: any WallClock = SystemClock(),
        logger: Logger = Logger(level: .error), _ body: (TestService) async throws -> Void
    ) async throws {
        let conninfo = try await TestDatabase.create()
        var configuration = Configuration(http: .init(host: "127.0.0.1", port: 0, eventLoops: 2))
        configuration.databasePoolSize = 8
        // Test services and their receivers live on loopback; tests of the refusal turn this off.
        configuration.deletionPolicy.endpoints.allowPrivate = true
        configure(&configuration)
        try await Schema.migrator.migrate(conninfo: conninfo)
        let pool = PostgresRegistry.pool(
            conninfo: conninfo, size: configuration.databasePoolSize,
            acquireTimeoutMillis: configuration.databaseAcquireTimeoutMillis,
            statementTimeoutMillis: configuration.databaseStatementTimeoutMillis,
            batchLockWaitMillis: configuration.databaseBatchLockWaitMillis,
            projectShare: configuration.databaseProjectShare)
        let box = try SecretBox(key: try SecureRandom.bytes(32))
        try await PostgresRegistry.prepare(pool: pool, box: box)
        let app = try await Application.build(
            configuration: configuration, stores: PostgresRegistry.stores(pool: pool, box: box), clock: clock,
            logger: logger, pools: { pool.loops.attach($0) })
        let service = try await TestService.seed(
            app: app, pool: pool, box: box, conninfo: conninfo, number: 123_456_789_012, id: "demo-proj")
        do {
            try await body(service)
        } catch {
            await app.shutdown()
            await TestDatabase.drop(conninfo)
            throw error
        }
        await app.shutdown()
        await TestDatabase.drop(conninfo)
    }

    static func seed(
        app: Application, pool: PostgresPool, box: SecretBox, conninfo: String, number: Int64, id: String
    ) async throws
        -> TestService
    {
        let seeded = try await SeededProject.make(on: app.catalog, id: id, number: number)
        let (key, project, web, ios, android, consentFirst) = (
            seeded.serverKey, seeded.project, seeded.web, seeded.ios, seeded.android, seeded.consentFirst
        )
        let port = try await app.start()
        return TestService(
            app: app, port: port, conninfo: conninfo, pool: pool, box: box, project: project, serverKey: key, web: web,
            ios: ios,
            android: android, consentFirst: consentFirst)
    }

    /// Another replica of the service on the same database (its own pool, no listener), closed by `shutdown()`.
    public func replica() async throws -> Application {
        let pool = PostgresRegistry.pool(
            conninfo: conninfo, size: app.configuration.databasePoolSize,
            acquireTimeoutMillis: app.configuration.databaseAcquireTimeoutMillis,
            statementTimeoutMillis: app.configuration.databaseStatementTimeoutMillis,
            batchLockWaitMillis: app.configuration.databaseBatchLockWaitMillis,
            projectShare: app.configuration.databaseProjectShare)
        return try await Application.build(
            configuration: app.configuration, stores: PostgresRegistry.stores(pool: pool, box: box), clock: app.clock,
            logger: Logger(level: .error))
    }

    /// Adds a second project (for isolation tests) on the same service.
    public func addProject(id: String, number: Int64) async throws -> (project: Project, serverKey: String, app: App) {
        let key = try await app.catalog.createProject(id: id, number: number)
        let project = Project(id: id, number: number)
        let web = try await app.catalog.createApp(
            project: project, platform: .web, bundleID: nil, autoInitDefault: true)
        return (project, key, web)
    }

    // MARK: - Requests

    /// Sends one request on a new connection and reads the response.
    public func request(_ method: String, _ path: String, headers: [String: String] = [:], body: [UInt8]? = nil)
        async throws -> Reply
    {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if let body { head += "Content-Length: \(body.count)\r\n" }
        let client = try RawHTTPClient(port: port)
        try await client.send(Array((head + "\r\n").utf8) + (body ?? []))
        guard let response = try await client.readResponse(headRequest: method == "HEAD") else {
            throw POSIXError(.ECONNRESET)
        }
        return Reply(raw: response)
    }

    public func request(_ method: String, _ path: String, headers: [String: String] = [:], json: JSONValue) async throws
        -> Reply
    {
        var all = headers
        if all["Content-Type"] == nil { all["Content-Type"] = "application/json" }
        return try await request(method, path, headers: all, body: json.encoded())
    }

}

public struct CreatedInstallationReply: Sendable {
    public let fid: String
    public let refreshToken: String
    public let authToken: String
}

/// A response with its body parsed as JSON when it is JSON.
public struct Reply: Sendable, CustomStringConvertible {
    public let raw: RawResponse

    public init(raw: RawResponse) { self.raw = raw }
    public var status: Int { raw.status }
    public var json: JSONValue? { try? JSONParser.parse(raw.body) }
    public var text: String { raw.text }
    public func header(_ name: String) -> String? { raw.header(name) }
    public var description: String { "\(status) \(text.prefix(500))" }

    /// `error.status` of a Google-style error body.
    public var errorStatus: String? { json?["error"]?["status"]?.stringValue }
    /// `error.code` of a Google-style error body.
    public var errorCode: Int64? { json?["error"]?["code"]?.int64Value }
}

public struct ReplyError: Error, CustomStringConvertible {
    public let reply: Reply
    public var description: String { "unexpected reply: \(reply)" }
}
