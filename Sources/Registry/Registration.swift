import Foundation

/// One installation's push registration: its current token and what the platform needs to deliver to it.
public struct Registration: Sendable, Equatable {
    public var projectID: String
    public var fid: String
    public var token: String
    public var platform: Platform
    public var apnsToken: String?
    public var apnsEnvironment: String?
    public var bundleID: String?
    public var appVersion: String?
    public var sdkVersion: String?
    public var web: WebPush?
    public var state: String
    public var clientTime: Date?
    public var createdAt: Date
    public var refreshedAt: Date

    public init(
        projectID: String, fid: String, token: String, platform: Platform, apnsToken: String? = nil,
        apnsEnvironment: String? = nil, bundleID: String? = nil, appVersion: String? = nil, sdkVersion: String? = nil,
        web: WebPush? = nil, state: String = "active", clientTime: Date? = nil, createdAt: Date, refreshedAt: Date
    ) {
        self.projectID = projectID
        self.fid = fid
        self.token = token
        self.platform = platform
        self.apnsToken = apnsToken
        self.apnsEnvironment = apnsEnvironment
        self.bundleID = bundleID
        self.appVersion = appVersion
        self.sdkVersion = sdkVersion
        self.web = web
        self.state = state
        self.clientTime = clientTime
        self.createdAt = createdAt
        self.refreshedAt = refreshedAt
    }
}

/// A web push subscription as the JS SDK sends it.
public struct WebPush: Sendable, Equatable {
    public var endpoint: String
    public var auth: String
    public var p256dh: String
    public var applicationPubKey: String?
    public var origin: String?

    public init(endpoint: String, auth: String, p256dh: String, applicationPubKey: String?, origin: String?) {
        self.endpoint = endpoint
        self.auth = auth
        self.p256dh = p256dh
        self.applicationPubKey = applicationPubKey
        self.origin = origin
    }
}

/// How long a registration stays fresh: stale after `staleAfter` without a refresh (still targeted, reported),
/// expired after `expireAfter` (no longer targeted).
public struct Freshness: Sendable {
    public var staleAfter: TimeInterval
    public var expireAfter: TimeInterval

    public init(staleDays: Double = 30, expireDays: Double = 270) {
        staleAfter = staleDays * 86_400
        expireAfter = expireDays * 86_400
    }
}

/// What a token refresh callback did.
public enum RefreshOutcome: String, Sendable {
    case created, refreshed, superseded, moved
    /// The callback was older (by `clientTime`) than what is stored; nothing changed.
    case ignoredAsOlder = "ignored_as_older"
}

/// What the store did with a refresh callback.
public enum RefreshResult: Sendable {
    case stored(Registration, RefreshOutcome)
    case installationNotFound
    case consentOff
}

/// Storage of registrations.
public protocol RegistrationStore: Sendable {
    /// Creates or replaces the installation's registration (client routes); returns it as stored.
    func upsert(_ registration: Registration) async throws -> Registration
    /// The token refresh callback: supersedes, moves a token from another installation, or ignores an older one;
    /// refused when the installation is missing or its messaging consent is off.
    func refresh(_ registration: Registration) async throws -> RefreshResult
    /// The installations of `tokens` (one query for a whole batch); tokens not found are absent.
    func fids(projectID: String, tokens: [String]) async throws -> [String: String]
    func find(projectID: String, fid: String) async throws -> Registration?
    func find(projectID: String, token: String) async throws -> Registration?
    func find(projectID: String, apnsToken: String) async throws -> Registration?
    /// Removes the installation's registration; false when it had none.
    func delete(projectID: String, fid: String) async throws -> Bool
}
