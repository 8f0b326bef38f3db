import Crypto
import Foundation

/// One installation's push registration as stored: its current token and what the platform needs to deliver to it.
public struct Registration: Sendable, Equatable {
    public var projectID: String
    public var fid: String
    public var token: String
    public var platform: Platform
    public var apnsToken: String?
    public var apnsEnvironment: APNsEnvironment?
    public var bundleID: String?
    public var appVersion: String?
    public var sdkVersion: String?
    public var web: WebPush?
    public var state: RegistrationState
    public var clientTime: Date?
    public var createdAt: Date
    public var refreshedAt: Date
    /// Why send feedback retired it (with ``RegistrationState/retired``).
    public var retirement: Retirement?
    /// Set while send feedback holds it in quarantine (it is still targeted).
    public var quarantine: Quarantine?

    public init(
        projectID: String, fid: String, token: String, platform: Platform, apnsToken: String? = nil,
        apnsEnvironment: APNsEnvironment? = nil, bundleID: String? = nil, appVersion: String? = nil,
        sdkVersion: String? = nil, web: WebPush? = nil, state: RegistrationState = .active, clientTime: Date? = nil,
        createdAt: Date, refreshedAt: Date, retirement: Retirement? = nil, quarantine: Quarantine? = nil
    ) {
        self.retirement = retirement
        self.quarantine = quarantine
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

/// Why and when send feedback retired a registration.
public struct Retirement: Sendable, Equatable {
    /// The sender's code (`UNREGISTERED`, `Unregistered`, `410`, ...).
    public let reason: String
    public let channel: FeedbackChannel
    public let at: Date
    /// Since when the sender says the token is invalid (APNs 410's timestamp).
    public let invalidSince: Date?

    public init(reason: String, channel: FeedbackChannel, at: Date, invalidSince: Date?) {
        self.reason = reason
        self.channel = channel
        self.at = at
        self.invalidSince = invalidSince
    }

    /// Whether a write of the registration leaves it retired: only a write of the same tokens (FCM and APNs) whose
    /// client time is not after the time the token became invalid (the sender's, or the retirement's). Any other
    /// write revives it.
    /// Both stores apply exactly this rule (PostgreSQL in `registry_feedback_revive`, migration 21).
    public func survives(_ write: Registration, stored: Registration) -> Bool {
        guard write.token == stored.token, write.apnsToken == stored.apnsToken, let invalidSince,
            let clientTime = write.clientTime
        else { return false }
        return clientTime <= invalidSince
    }
}

/// Send feedback's mark on a registration that may be dead, or whose retirement the breaker held back.
public struct Quarantine: Sendable, Equatable {
    public let reason: String
    public let channel: FeedbackChannel
    public let at: Date
    public let byBreaker: Bool

    public init(reason: String, channel: FeedbackChannel, at: Date, byBreaker: Bool) {
        self.reason = reason
        self.channel = channel
        self.at = at
        self.byBreaker = byBreaker
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

    /// The first field (its name under the subscription) that breaks the rules a stored subscription meets, with the
    /// rule; nil when it meets them. One rule for the registrations route and for imports: an http(s) endpoint of
    /// 1-2,048 bytes, `auth` and `p256dh` of 1-256 bytes of base64url, a key of at most 256 bytes, an origin of at
    /// most 256 printable bytes; no NUL anywhere.
    public var refusal: (field: String, reason: String)? {
        if endpoint.isEmpty || endpoint.utf8.count > 2048 || endpoint.utf8.contains(0) {
            return ("endpoint", "must be 1-2048 bytes")
        }
        guard endpoint.hasPrefix("https://") || endpoint.hasPrefix("http://") else {
            return ("endpoint", "must be an http(s) URL")
        }
        for (field, value) in [("auth", auth), ("p256dh", p256dh)] {
            guard (1...256).contains(value.utf8.count), Base64URL.decode(value) != nil else {
                return (field, "must be 1-256 bytes of base64url")
            }
        }
        if let key = applicationPubKey, key.utf8.count > 256 || key.utf8.contains(0) {
            return ("applicationPubKey", "must be at most 256 bytes, without NUL")
        }
        if let origin, !Identifiers.isPlainText(origin, limit: 256) {
            return ("origin", "must be at most 256 bytes of printable text")
        }
        return nil
    }
}

/// What an installation says about its own push registration (the web, iOS or Android body of the client routes).
/// The token is the service's to make; the rest is the platform's delivery details.
public struct ClientRegistration: Sendable, Equatable {
    public var platform: Platform
    public var apns: APNsDevice?
    public var bundleID: String?
    public var appVersion: String?
    public var sdkVersion: String?
    public var web: WebPush?

    public init(
        platform: Platform, apns: APNsDevice? = nil, bundleID: String? = nil, appVersion: String? = nil,
        sdkVersion: String? = nil, web: WebPush? = nil
    ) {
        self.platform = platform
        self.apns = apns
        self.bundleID = bundleID
        self.appVersion = appVersion
        self.sdkVersion = sdkVersion
        self.web = web
    }
}

/// What an app backend reports in the token refresh callback: the token its client received, and when.
public struct TokenRefresh: Sendable, Equatable {
    public var token: String
    public var platform: Platform
    public var apns: APNsDevice?
    /// When the client received the token; an older report never replaces a newer one.
    public var clientTime: Date?

    public init(token: String, platform: Platform, apns: APNsDevice? = nil, clientTime: Date? = nil) {
        self.token = token
        self.platform = platform
        self.apns = apns
        self.clientTime = clientTime
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

    /// Whether `registration` may be sent to at `now`, and if not, the first reason in this order: no consent,
    /// disabled (consent was given again, but the client has not registered since), expired; a stale registration
    /// is still sendable.
    public func sendability(of registration: Registration, messagingConsent: Bool, at now: Date) -> Sendability {
        let age = now.timeIntervalSince(registration.refreshedAt)
        if !messagingConsent { return .noConsent }
        if registration.state == .disabled { return .disabled }
        if registration.state == .retired { return .retired }
        if age > expireAfter { return .expired }
        if age > staleAfter { return .stale }
        return .ok
    }
}

/// What a registration write did.
public enum RefreshOutcome: String, Sendable {
    case created, refreshed, superseded, moved
    /// The callback was older (by `clientTime`) than what is stored; nothing changed.
    case ignoredAsOlder = "ignored_as_older"

    /// Whether a report with `incoming` client time may replace what was stored with `stored`: a report without a
    /// time always may; otherwise it must not be older. The stores apply exactly this rule, under the
    /// installation's lock.
    public static func accepts(incoming: Date?, stored: Date?) -> Bool {
        guard let incoming, let stored else { return true }
        return incoming >= stored
    }

    /// What a written refresh was: the installation's first token, the same token again, a new one in place of
    /// `previous`, or a token taken from another installation. Every store names its writes by this.
    public static func of(previous: String?, incoming: String, movedFromAnother: Bool) -> RefreshOutcome {
        if movedFromAnother { return .moved }
        guard let previous else { return .created }
        return previous == incoming ? .refreshed : .superseded
    }

    /// How far ahead of the database's clock a `clientTime` may be (clients' clocks drift; a time far ahead would
    /// pin the registration against every later refresh).
    public static let maxClientTimeAhead: Double = 300
    /// The earliest `clientTime` accepted: 2000-01-01T00:00:00Z.
    public static let earliestClientTime = Date(timeIntervalSince1970: 946_684_800)
}

/// What the store did with a registration write. Every write checks the installation and its messaging consent
/// in the same transaction as it writes, under the installation's lock, so a withdrawal is never overtaken.
public enum RegistrationWrite: Sendable {
    case stored(Registration, RefreshOutcome)
    case installationNotFound
    case consentOff
    /// `clientTime` is more than ``RefreshOutcome/maxClientTimeAhead`` seconds ahead of the store's clock.
    case clientTimeAhead

    /// What a write came to, without the registration: what an audit entry appended with it records
    /// (``AuditCompanion``).
    public enum Kind: CaseIterable, Hashable, Sendable {
        case stored, installationNotFound, consentOff, clientTimeAhead
    }

    public var kind: Kind {
        switch self {
        case .stored: return .stored
        case .installationNotFound: return .installationNotFound
        case .consentOff: return .consentOff
        case .clientTimeAhead: return .clientTimeAhead
        }
    }
}

/// Storage of registrations.
public protocol RegistrationStore: Sendable {
    /// The client's own registration: creates it with `registration.token`, or updates the delivery details of the
    /// existing one, keeping its token and creation time.
    func register(_ registration: Registration) async throws -> RegistrationWrite
    /// The token refresh callback: supersedes, moves a token from another installation, or ignores an older one
    /// (``RefreshOutcome/accepts(incoming:stored:)``).
    /// `audit`, when given, is appended in the same transaction as the write, with the outcome of what it came to,
    /// and marked appended (``AuditCompanion/markAppended(_:)``).
    func refresh(_ registration: Registration, audit: AuditCompanion<RegistrationWrite.Kind>?) async throws
        -> RegistrationWrite
    /// The installations of `tokens` (one query for a whole batch); tokens not found are absent.
    func fids(projectID: String, tokens: [String]) async throws -> [String: String]
    func find(projectID: String, fid: String) async throws -> Registration?
    func find(projectID: String, token: String) async throws -> Registration?
    /// Removes the installation's registration and its topic subscriptions (a token's topics end with it); false when
    /// it had no registration (its topics go all the same).
    func delete(projectID: String, fid: String) async throws -> Bool
    /// `batchImport`: for each item, the token of the registration that already holds its APNs token, or else (when
    /// `create`) a new installation with its consent and registration; all in one transaction.
    ///
    /// - Returns: the registration token per APNs token; absent when it did not exist and `create` was false.
    func importAPNs(_ items: [APNsImport], initialConsent: Bool, create: Bool) async throws -> [String: String]
    /// The installation's token for another sender and scope (``TokenAudience/sender(_:scope:)``): the stored one, or
    /// else `candidate`, stored unless the installation holds `limit` already. Under the installation's lock, after
    /// its messaging consent.
    func senderToken(projectID: String, fid: String, sender: String, scope: String, candidate: String, at: Date,
        limit: Int) async throws -> SenderTokenWrite
    /// Removes the installation's sender tokens: the one of `only`'s sender and scope, or all when it is nil.
    ///
    /// - Returns: the tokens removed.
    func deleteSenderTokens(projectID: String, fid: String, only: (sender: String, scope: String)?) async throws
        -> [String]
}

/// One APNs token of a `batchImport`, with the installation and registration made for it should it be new.
public struct APNsImport: Sendable {
    public let apnsToken: String
    public let installation: Installation
    public let fidHash: [UInt8]
    public let registration: Registration
}
