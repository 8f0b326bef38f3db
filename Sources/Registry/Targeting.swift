import Foundation

/// A registration a message may be sent to.
public struct Target: Sendable, Equatable {
    public let fid: String
    public let token: String
    public let platform: Platform
    public let refreshedAt: Date
    public let stale: Bool
    /// Send feedback holds it in quarantine (still targeted).
    public let quarantined: Bool
}

/// A registration that passed the targeting filter, as the store returns it.
public struct LiveRegistration: Sendable, Equatable {
    public let fid: String
    public let token: String
    public let platform: Platform
    public let refreshedAt: Date
    /// Send feedback holds it in quarantine: still targeted, most likely fine.
    public let quarantined: Bool

    public init(fid: String, token: String, platform: Platform, refreshedAt: Date, quarantined: Bool = false) {
        self.fid = fid
        self.token = token
        self.platform = platform
        self.refreshedAt = refreshedAt
        self.quarantined = quarantined
    }
}

/// Which registrations targeting may return: those of `projectID` that are active, refreshed after
/// `expiredBefore`, and whose installation has messaging consent; keyset-paged by FID after `after`.
/// The stores apply exactly ``admits(state:refreshedAt:messagingConsent:)``, in their own query language.
public struct TargetFilter: Sendable, Equatable {
    public let projectID: String
    public let expiredBefore: Date
    public let after: String?
    public let limit: Int

    public func admits(state: RegistrationState, refreshedAt: Date, messagingConsent: Bool) -> Bool {
        state == .active && refreshedAt > expiredBefore && messagingConsent
    }
}

/// Who a topic or condition reaches, read from the store.
public protocol TargetingStore: Sendable {
    /// Live registrations subscribed to `topic`, in FID order.
    func members(topic: String, filter: TargetFilter) async throws -> [LiveRegistration]
    /// Live registrations that satisfy `condition`, in FID order.
    func resolve(condition: Condition, filter: TargetFilter) async throws -> [LiveRegistration]
}

/// Whether a token may be sent to, and if not, why.
public enum Sendability: String, Sendable {
    case ok = "OK"
    case stale = "STALE"
    case noConsent = "NO_CONSENT"
    case expired = "EXPIRED"
    case disabled = "DISABLED"
    case deleted = "DELETED"
    case unknownToken = "UNKNOWN_TOKEN"
    /// A sender reported the token dead (send feedback).
    case retired = "RETIRED"

    public var sendable: Bool { self == .ok || self == .stale }
}

/// Who a topic or condition reaches: live registrations only (active, not expired, messaging consent on),
/// keyset-paged by FID; and whether one token may be sent to.
public struct TargetingService: Sendable {
    let store: any TargetingStore
    let registrations: RegistrationService
    let installations: InstallationService
    let consent: ConsentService
    public let clock: any WallClock
    public let freshness: Freshness
    let scans = ProjectScans()

    public init(
        store: any TargetingStore, registrations: RegistrationService, installations: InstallationService,
        consent: ConsentService, clock: any WallClock, freshness: Freshness
    ) {
        self.store = store
        self.registrations = registrations
        self.installations = installations
        self.consent = consent
        self.clock = clock
        self.freshness = freshness
    }

    private func filter(projectID: String, after: String?, limit: Int, now: Date) -> TargetFilter {
        TargetFilter(
            projectID: projectID, expiredBefore: now.addingTimeInterval(-freshness.expireAfter), after: after,
            limit: limit)
    }

    private func target(_ live: LiveRegistration, now: Date) -> Target {
        Target(
            fid: live.fid, token: live.token, platform: live.platform, refreshedAt: live.refreshedAt,
            stale: now.timeIntervalSince(live.refreshedAt) > freshness.staleAfter, quarantined: live.quarantined)
    }

    /// Live registrations subscribed to `topic`, after FID `after`.
    public func members(projectID: String, topic: String, after: String?, limit: Int) async throws -> [Target] {
        let now = clock.now()
        return try await store.members(
            topic: topic, filter: filter(projectID: projectID, after: after, limit: limit, now: now)
        )
        .map { target($0, now: now) }
    }

    /// Live registrations that satisfy `condition`, after FID `after`.
    ///
    /// A condition that is more than the topics every target has (`'a' in topics || 'b' in topics`, a `!`, or
    /// `'a' in topics && !('b' in topics)`) tests rows one by one for as long as it takes to fill the page: the
    /// project's registrations, or the members of the topics it requires, which may be every installation of the
    /// project. On a large project that is up to the statement timeout. At most ``ProjectScans/perProject`` such pages
    /// of one project run at once on a replica; another is refused (429, retried by the caller), so one project's
    /// conditions cannot hold the pool. Topics alone (`'a' in topics && 'b' in topics`) merge their indexes: not
    /// limited.
    public func resolve(projectID: String, condition: Condition, after: String?, limit: Int) async throws -> [Target] {
        let now = clock.now()
        let page = filter(projectID: projectID, after: after, limit: limit, now: now)
        guard condition.requiredTopics.rest != nil else {
            return try await store.resolve(condition: condition, filter: page).map { target($0, now: now) }
        }
        guard scans.enter(projectID) else {
            throw RegistryError(
                .resourceExhausted,
                "at most \(ProjectScans.perProject) conditions that test each target (beyond topics every target has) "
                    + "are resolved at once for a project; retry")
        }
        defer { scans.leave(projectID) }
        return try await store.resolve(condition: condition, filter: page).map { target($0, now: now) }
    }

    /// Why a token (or FID) may or may not be sent to.
    public func sendability(project: Project, token: String) async throws -> Sendability {
        try await verdict(project: project, token: token).reason
    }

    /// The sendability of a token and the registration it was judged on (its retirement and quarantine say more).
    public func verdict(project: Project, token: String) async throws -> (reason: Sendability, registration: Registration?) {
        guard let registration = try await registrations.find(project: project, tokenOrFID: token) else {
            let fid = Identifiers.isValidFID(token) ? token : RegistrationToken.fid(of: token)
            if let fid, try await installations.wasDeleted(project: project, fid: fid) { return (.deleted, nil) }
            return (.unknownToken, nil)
        }
        guard let installation = try await installations.find(project: project, fid: registration.fid) else {
            return (.deleted, nil)
        }
        let reason = freshness.sendability(
            of: registration, messagingConsent: try await consent.messagingEnabled(installation: installation),
            at: clock.now())
        return (reason, registration)
    }
}

/// The pages of conditions that read a whole project's registrations, running on this replica, by project.
final class ProjectScans: Sendable {
    static let perProject = 2
    private let running = ProjectCounts()

    /// Takes a slot of the project's; false when it has none left.
    func enter(_ project: String) -> Bool { running.enter(project, limit: Self.perProject) }

    func leave(_ project: String) { running.leave(project) }
}
