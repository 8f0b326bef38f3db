import Crypto
import Foundation
import JSON
import Postgres
import Registry
import RegistryPostgres
import Synchronization
import Testing
import TokenRegistryTesting

/// Which implementation of the stores a domain test runs on: both must pass the same tests.
enum StoreKind: String, CaseIterable, CustomTestStringConvertible {
    case memory, postgres

    /// In memory always; on PostgreSQL when a test cluster is configured (and always under `CI=true`).
    static var available: [StoreKind] { TestDatabase.isAvailable ? [.memory, .postgres] : [.memory] }

    var testDescription: String { rawValue }
}

/// The domain services on a fresh set of stores, a project with a web app (opted in) and an iOS app (opted out),
/// and a clock that stands still.
struct DomainFixture {
    /// Starts at the real time (whole seconds): the database compares some inputs with its own clock.
    let clock = ManualClock(Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)))
    let services: RegistryServices
    let transport = ScriptedTransport()
    /// The names looked up, by whom.
    let resolver = RecordingResolver()
    let project = Project(id: "demo-proj", number: 123)
    let web: App
    let optedOut: App

    /// Runs `body` on fresh stores of `kind` (a throwaway database for PostgreSQL, dropped afterwards).
    ///
    /// - Parameter databaseTime: the jobs read the store's clock (as in production) instead of the fixture's.
    static func with(
        _ kind: StoreKind, databaseTime: Bool = false, userPolicy: UserPolicy = UserPolicy(),
        _ body: (DomainFixture) async throws -> Void
    ) async throws {
        switch kind {
        case .memory:
            try await body(
                try await DomainFixture(
                    databaseTime: databaseTime, userPolicy: userPolicy, stores: { InMemoryStores(clock: $0).stores }))
        case .postgres:
            let conninfo = try await TestDatabase.create()
            try await Schema.migrator.migrate(conninfo: conninfo)
            let pool = PostgresPool(.init(conninfo: conninfo, maxConnections: 4))
            do {
                let box = try SecretBox(key: try SecureRandom.bytes(32))
                try await PostgresRegistry.prepare(pool: pool, box: box)
                try await body(
                    try await DomainFixture(
                        databaseTime: databaseTime, userPolicy: userPolicy,
                        stores: { _ in PostgresRegistry.stores(pool: pool, box: box) }))
            } catch {
                pool.close()
                await TestDatabase.drop(conninfo)
                throw error
            }
            pool.close()
            await TestDatabase.drop(conninfo)
        }
    }

    private init(databaseTime: Bool, userPolicy: UserPolicy, stores: (any WallClock) -> RegistryStores) async throws {
        // A jobs run delivers until nothing is due, however slowly a busy test machine runs it.
        var policy = DeletionPolicy()
        policy.deliveryRunBudget = 300
        services = try await RegistryServices.make(
            stores: stores(clock), clock: clock, freshness: Freshness(staleDays: 30, expireDays: 270), policy: policy,
            userPolicy: userPolicy, transport: transport, resolver: resolver, jobTime: databaseTime ? .database : .explicit(clock))
        _ = try await services.catalog.createProject(id: project.id, number: project.number)
        web = try await services.catalog.createApp(
            project: project, platform: .web, bundleID: nil, autoInitDefault: true)
        optedOut = try await services.catalog.createApp(
            project: project, platform: .ios, bundleID: "com.example.app", autoInitDefault: false)
    }

    /// Links a service named `name` (its endpoint `https://<name>.example/hook`) to the project; its secret.
    @discardableResult
    func link(_ name: String) async throws -> String {
        try await services.deletions.addLinkedService(
            projectID: project.id, name: name, endpoint: "https://\(name).example/hook"
        ).1
    }

    /// The service `name` replaces the secret it was handed through a server key with one of its own (a rotation
    /// signed with `secret`); its new secret, which the project never saw.
    func rotateAsService(_ name: String, secret: String) async throws -> String {
        let body = Array("{}".utf8)
        let signature = WebhookSignature.header(
            secrets: [secret], timestamp: Int64(Date().timeIntervalSince1970), body: body,
            for: .rotation(project: project.id, service: name))
        let rotated = try await services.deletions.rotateSecretAsService(
            projectID: project.id, name: name, signature: signature, body: body)
        return try #require(rotated).secret
    }

    /// The `deliveryId` of the last notice sent to the service `name` about `fid`.
    func deliveryID(_ name: String, fid: String) throws -> String {
        let notice = try #require(
            transport.sent.last {
                $0.endpoint == "https://\(name).example/hook" && (try? JSONParser.parse($0.body))?["fid"]?.stringValue == fid
            })
        return try #require(try JSONParser.parse(notice.body)["deliveryId"]?.stringValue)
    }

    /// The service `name` acknowledges its delivery of `fid`'s deletion, signed with `secret` at `time`.
    func acknowledge(
        _ name: String, fid: String, secret: String, deliveryID: String? = nil,
        time: Int64 = Int64(Date().timeIntervalSince1970)
    ) async throws {
        let id = try deliveryID ?? self.deliveryID(name, fid: fid)
        let body = Array("{\"deliveryId\":\"\(id)\"}".utf8)
        let signature = WebhookSignature.header(
            secrets: [secret], timestamp: time, body: body,
            for: .acknowledgement(project: project.id, fid: fid, service: name, deliveryID: id))
        try await services.deletions.acknowledge(
            projectID: project.id, fid: fid, service: name, deliveryID: id, signature: signature, body: body)
    }

    /// Deletes an installation of the project; whether there was one.
    @discardableResult
    func delete(_ installation: Installation, reason: DeletionReason) async throws -> Bool {
        try await services.installations.delete(projectID: project.id, fid: installation.fid, reason: reason)
    }

    /// A new installation of `app` (the web app by default).
    func installation(_ app: App? = nil, fid: String? = nil) async throws -> Installation {
        let created = try await services.installations.create(
            project: project, app: app ?? web, requestedFID: fid, sdkVersion: "t:1")
        return try await services.installations.find(project: project, fid: created.fid)!
    }

    func consent(_ installation: Installation, _ granted: Bool) async throws {
        _ = try await services.consent.record(
            installation: installation, change: ConsentChange(granted: granted, actor: .installation))
    }

    func register(_ installation: Installation) async throws -> Registration {
        try await services.registrations.register(
            installation: installation,
            ClientRegistration(
                platform: .web,
                web: WebPush(
                    endpoint: "https://push.example/1", auth: "YQ", p256dh: "Yg", applicationPubKey: nil, origin: nil)))
    }

    func refresh(_ fid: String, _ token: String, at clientTime: Date?) async throws -> (Registration, RefreshOutcome) {
        try await services.registrations.refresh(
            project: project, fid: fid, TokenRefresh(token: token, platform: .android, clientTime: clientTime))
    }

    func members(_ topic: String) async throws -> [String] {
        try await services.targeting.members(projectID: project.id, topic: topic, after: nil, limit: 100).map(\.fid)
    }
}

/// A resolver that resolves nothing and records every look-up asked of it (host, owner).
final class RecordingResolver: HostResolver {
    private let asked = Mutex<[(String, String)]>([])

    var lookUps: [(host: String, owner: String)] { asked.withLock { $0 } }

    func resolve(_ host: String, for owner: String) async throws -> [IPAddress] {
        asked.withLock { $0.append((host, owner)) }
        throw RegistryError(.notFound, "no such host")
    }
}
