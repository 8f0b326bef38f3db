import Crypto
import Foundation

/// A project: its ID and number (clients may name it by either).
public struct Project: Sendable, Equatable {
    public let id: String
    public let number: Int64

    public init(id: String, number: Int64) {
        self.id = id
        self.number = number
    }
}

/// An app of a project, as registered with `token-registry app create`.
public struct App: Sendable, Equatable {
    public let id: String
    public let projectID: String
    public let platform: Platform
    public let bundleID: String?
    public let apiKey: String
    public let autoInitDefault: Bool
    /// The web origins (`https://a.example`) browsers may call from for this app; empty: any origin.
    public let webOrigins: [String]

    public init(
        id: String, projectID: String, platform: Platform, bundleID: String?, apiKey: String, autoInitDefault: Bool,
        webOrigins: [String] = []
    ) {
        self.id = id
        self.projectID = projectID
        self.platform = platform
        self.bundleID = bundleID
        self.apiKey = apiKey
        self.autoInitDefault = autoInitDefault
        self.webOrigins = webOrigins
    }

    /// Whether a browser page of `origin` may call the SDK routes for this app.
    public func allows(origin: String) -> Bool { webOrigins.isEmpty || webOrigins.contains(origin.lowercased()) }
}

/// Storage of projects, apps and server keys.
public protocol CatalogStore: Sendable {
    func insertProject(_ project: Project, serverKeyHash: [UInt8]) async throws
    func insertApp(_ app: App) async throws
    func project(idOrNumber: String) async throws -> Project?
    func app(id: String) async throws -> App?
    /// The apps that hold `apiKey` (all of one project), in app ID order; empty for an unknown key.
    func apps(apiKey: String) async throws -> [App]
    /// The project of a server key in force (not expired).
    func projectID(serverKeyHash: [UInt8]) async throws -> String?
    /// Adds a server key; the project's other keys in force expire at `othersExpireAt` (if not sooner).
    func addServerKey(projectID: String, hash: [UInt8], at: Date, othersExpireAt: Date) async throws
    /// Expires the project's keys now: all of them, or all but the newest. Returns how many.
    func revokeServerKeys(projectID: String, keepNewest: Bool, at: Date) async throws -> Int
    func apps(projectID: String) async throws -> [App]
}

/// Projects, apps and server keys, with a short-lived cache in front of the store: these rows change rarely and
/// are read on every request. A rotated-out server key stops working within ``cacheTTL``.
public final class Catalog: Sendable {
    public static let cacheTTL: Double = 30

    let store: any CatalogStore
    private let projects = TTLCache<String, Project>(capacity: 50_000)
    private let apps = TTLCache<String, App>(capacity: 50_000)
    private let keys = TTLCache<[UInt8], String>(capacity: 50_000)
    private let projectApps = TTLCache<String, [App]>(capacity: 10_000)
    private let keyApps = TTLCache<String, [App]>(capacity: 50_000)
    /// Why an app was refused the key it asked for.
    public static let keyOfAnotherProject = "the API key belongs to another project"

    public init(store: any CatalogStore) { self.store = store }

    // MARK: - Administration (CLI)

    /// Creates a project and its first server key.
    ///
    /// - Returns: the server key, which is stored only as a hash and shown this once.
    public func createProject(id: String, number: Int64) async throws -> String {
        guard Identifiers.isValidProjectID(id) else {
            throw RegistryError.invalid(
                "id", "project IDs are 6-30 lower-case letters, digits and hyphens, starting with a letter")
        }
        guard number > 0, number < 1_000_000_000_000_000 else {
            throw RegistryError.invalid("number", "must be a positive number of at most 18 digits")
        }
        let key = try Identifiers.newServerKey()
        try await store.insertProject(Project(id: id, number: number), serverKeyHash: SHA256.hash(key))
        return key
    }

    /// Registers an app. `appID` and `apiKey`, when given, are the identifiers the app's Firebase configuration
    /// (`GoogleService-Info.plist`, `google-services.json`, the web config) already carries, so it needs no change.
    ///
    /// Several apps of a project may hold one API key, as Firebase's do (one key for each platform, shipped by every
    /// app of it); a key belongs to one project.
    ///
    /// - Throws: `.invalidArgument` naming the option at fault; `.alreadyExists` for an app ID in use, or an API key
    ///   of another project.
    public func createApp(
        project: Project, platform: Platform, bundleID: String?, autoInitDefault: Bool, appID: String? = nil,
        apiKey: String? = nil, webOrigins: [String] = []
    ) async throws -> App {
        if let bundleID, bundleID.isEmpty || !Identifiers.isPlainText(bundleID, limit: 255) || bundleID.contains(" ") {
            throw RegistryError.invalid("bundle-id", "must be 1-255 printable characters without spaces")
        }
        if let appID {
            let parts = appID.split(separator: ":")
            guard Identifiers.isValidAppID(appID), parts.count == 4, parts[1] == String(project.number),
                parts[2] == platform.rawValue
            else {
                throw RegistryError.invalid(
                    "app-id",
                    "must be 1:\(project.number):\(platform.rawValue):<hex>, the project's number and platform")
            }
        }
        if let apiKey, !Identifiers.isValidAPIKey(apiKey) {
            throw RegistryError.invalid("api-key", "must be 39 characters of A-Z a-z 0-9 - _ starting with A (AIza…)")
        }
        let origins = try webOrigins.map { origin -> String in
            guard let normalised = Identifiers.webOrigin(origin) else {
                throw RegistryError.invalid(
                    "web-origin",
                    "\(origin.prefix(64)) is not an origin such as https://app.example, http://localhost:5173 or capacitor://localhost")
            }
            return normalised
        }
        let app = App(
            id: try appID ?? Identifiers.newAppID(projectNumber: project.number, platform: platform),
            projectID: project.id, platform: platform, bundleID: bundleID,
            apiKey: try apiKey ?? Identifiers.newAPIKey(),
            autoInitDefault: autoInitDefault, webOrigins: origins)
        do {
            try await store.insertApp(app)
        } catch let error as RegistryError where error.kind == .alreadyExists {
            if error.message == Catalog.keyOfAnotherProject { throw error }
            throw RegistryError(.alreadyExists, "an app with this app ID already exists")
        }
        projectApps.remove(project.id)
        keyApps.remove(app.apiKey)
        return app
    }

    /// A new server key for the project (shown once). The keys it had keep working for `keepOldFor` seconds, so
    /// backends can move over; replicas stop accepting an expired key within ``cacheTTL``.
    public func rotateServerKey(project: Project, keepOldFor: TimeInterval, at now: Date) async throws -> String {
        guard keepOldFor >= 0 else { throw RegistryError.invalid("keep-old-for", "must not be negative") }
        let key = try Identifiers.newServerKey()
        try await store.addServerKey(
            projectID: project.id, hash: SHA256.hash(key), at: now, othersExpireAt: now.addingTimeInterval(keepOldFor))
        return key
    }

    /// Revokes the project's server keys: all but the newest (ends a rotation's overlap early), or all of them.
    ///
    /// - Returns: how many keys were revoked.
    public func revokeServerKeys(project: Project, all: Bool, at now: Date) async throws -> Int {
        try await store.revokeServerKeys(projectID: project.id, keepNewest: !all, at: now)
    }

    // MARK: - Look-ups (cached)

    /// The project named by ID or number, as `{project}` in a path.
    public func project(_ reference: String) async throws -> Project? {
        // A project ID's rule, or a project number: nothing else is looked up (or cached as an alias).
        guard Identifiers.isValidProjectID(reference) || Identifiers.isProjectNumber(reference) else { return nil }
        if let hit = projects.lookup(reference) { return hit }
        let project = try await store.project(idOrNumber: reference)
        remember(projects, reference, project)
        return project
    }

    public func app(id: String) async throws -> App? {
        guard id.utf8.count <= 128 else { return nil }
        if let hit = apps.lookup("id:" + id) { return hit }
        let app = try await store.app(id: id)
        remember(apps, "id:" + id, app)
        return app
    }

    /// The apps that hold `apiKey`, all of one project; empty for a key that is no app's.
    public func apps(apiKey: String) async throws -> [App] {
        guard Identifiers.isValidAPIKey(apiKey) else { return [] }
        if let hit = keyApps.lookup(apiKey) { return hit ?? [] }
        let apps = try await store.apps(apiKey: apiKey)
        remember(keyApps, apiKey, apps.isEmpty ? nil : apps)
        return apps
    }

    /// The project's apps, cached as the other look-ups are: a browser's preflight reads them with no credential,
    /// so each would otherwise be a query anyone can send.
    public func apps(projectID: String) async throws -> [App] {
        if let hit = projectApps.lookup(projectID), let apps = hit { return apps }
        let apps = try await store.apps(projectID: projectID)
        projectApps.store(projectID, apps, ttl: Catalog.cacheTTL)
        return apps
    }

    /// The project a server key belongs to, or nil for an unknown key.
    public func projectID(serverKey: String) async throws -> String? {
        try await serverKeyOwner(serverKey)?.projectID
    }

    /// The project a server key belongs to, with the key's SHA-256: what the store keeps, and what the key's name in
    /// the audit log is made of (one hash a request, not one for each).
    public func serverKeyOwner(_ serverKey: String) async throws -> (projectID: String, keyHash: [UInt8])? {
        guard (1...256).contains(serverKey.utf8.count) else { return nil }
        let hash = SHA256.hash(serverKey)
        if let hit = keys.lookup(hash) { return hit.map { ($0, hash) } }
        let project = try await store.projectID(serverKeyHash: hash)
        remember(keys, hash, project)
        return project.map { ($0, hash) }
    }

    private func remember<K: Hashable & Sendable, V: Sendable>(_ cache: TTLCache<K, V>, _ key: K, _ value: V?) {
        // Misses are cached for a shorter time so a newly created project shows up quickly.
        cache.store(key, value, ttl: value == nil ? 2 : Catalog.cacheTTL)
    }
}
