import Foundation

/// One classified send result for one token (an FCM registration token, or for APNs the device token a
/// registration carries).
public struct FeedbackResult: Sendable, Equatable {
    public let token: String
    public let outcome: SendOutcome

    public init(token: String, outcome: SendOutcome) {
        self.token = token
        self.outcome = outcome
    }
}

/// What a result did to the registry.
public enum FeedbackAction: String, Sendable, CaseIterable {
    /// The token was the installation's current one: no longer targeted.
    case retired
    /// Marked, still targeted: it may be dead, or the breaker holds its retirement back.
    case quarantined
    /// Nothing about the token (a message, configuration, transient or unknown result; or a delivery).
    case ignored
    /// No registration holds this token now (never known, or replaced by a refresh).
    case notCurrent = "not_current"
    /// The registration was refreshed after the time the sender says the token stopped being valid.
    case refreshedSince = "refreshed_since"
    case alreadyRetired = "already_retired"
}

/// When the breaker trips, how long quarantine waits before a second "may be dead" retires, and how long retired
/// registrations are kept. Defaults that would have stopped the peers' mass deactivations: a wrong APNs environment
/// fails every token of an app, which is well over half of an app's results.
public struct FeedbackPolicy: Sendable, Equatable {
    /// Token-touching results (dead or may be dead) of one channel, as a share of all of its results in the window.
    public var breakerShare: Double = 0.5
    /// And at least this many of them.
    public var breakerMinimum: Int = 100
    public var window: TimeInterval = 600
    /// Retired registrations are purged this long after they were retired.
    public var retiredRetention: TimeInterval = 30 * 86_400

    public init() {}
}

/// A channel's breaker.
public struct BreakerState: Sendable, Equatable {
    public let channel: FeedbackChannel
    public let tripped: Bool
    public let trippedAt: Date?
    public let clearedAt: Date?
    /// What tripped it: token-touching results and all results in the window.
    public let failing: Int
    public let results: Int

    public init(channel: FeedbackChannel, tripped: Bool, trippedAt: Date?, clearedAt: Date?, failing: Int, results: Int) {
        self.channel = channel
        self.tripped = tripped
        self.trippedAt = trippedAt
        self.clearedAt = clearedAt
        self.failing = failing
        self.results = results
    }
}

/// `GET /v1/projects/{project}/hygiene`.
public struct HygieneReport: Sendable, Equatable {
    /// Registrations by state (`active`, `disabled`, `retired`), and how many are quarantined.
    public var byState: [String: Int] = [:]
    public var quarantined = 0
    /// Retired registrations by the code that retired them.
    public var retiredByReason: [String: Int] = [:]
    /// Results in the window, by channel and class.
    public var recent: [FeedbackChannel: [FeedbackClass: Int]] = [:]
    public var breakers: [BreakerState] = []

    public init() {}
}

/// What clearing a breaker did.
public struct BreakerClearance: Sendable, Equatable {
    /// Registrations the breaker held in quarantine: released (dismissed) or retired (confirmed).
    public let released: Int
    public let retired: Int

    public init(released: Int, retired: Int) {
        self.released = released
        self.retired = retired
    }
}

/// Storage of send feedback: the whole batch in one round trip.
public protocol FeedbackStore: Sendable {
    /// Counts the batch in its channels' windows first; trips a channel's breaker when its window crosses the
    /// policy; then applies each result in order: a token-touching result retires (or quarantines) the registration
    /// that holds the token as its current one, and only if it was not refreshed since `invalidSince`. Matching is on
    /// the token in the same statement that changes the row, so a refresh committed meanwhile is never retired.
    ///
    /// - Returns: one action per result, in order.
    func apply(projectID: String, results: [FeedbackResult], policy: FeedbackPolicy, at: Date) async throws
        -> [FeedbackAction]
    /// Clears a tripped breaker: its quarantined registrations are released, or (`confirm`) retired; the window
    /// starts again. Nil when the breaker was not tripped.
    func clearBreaker(projectID: String, channel: FeedbackChannel, confirm: Bool, at: Date) async throws
        -> BreakerClearance?
    func report(projectID: String, windowStart: Date) async throws -> HygieneReport
    /// Removes up to `limit` registrations retired before `cutoff`, and window counts older than `statsBefore`.
    func purgeRetired(before cutoff: Date, statsBefore: Date, limit: Int) async throws -> Int
}

/// Send feedback: what the senders learned about tokens, applied safely (docs/feedback.md).
public struct FeedbackService: Sendable {
    let store: any FeedbackStore
    let clock: any WallClock
    public let policy: FeedbackPolicy
    /// Results one request may carry.
    public static let maxBatch = 1000

    public init(store: any FeedbackStore, clock: any WallClock, policy: FeedbackPolicy = FeedbackPolicy()) {
        self.store = store
        self.clock = clock
        self.policy = policy
    }

    public func apply(project: Project, _ results: [FeedbackResult]) async throws -> [FeedbackAction] {
        guard results.count <= Self.maxBatch else {
            throw RegistryError.invalid("results", "at most \(Self.maxBatch) a request")
        }
        guard !results.isEmpty else { return [] }
        let now = clock.now()
        // A sender's "invalid since" is never later than now: one far ahead would keep a token retired through every
        // later refresh.
        let clamped = results.map { r in
            FeedbackResult(
                token: r.token,
                outcome: SendOutcome(
                    channel: r.outcome.channel, feedbackClass: r.outcome.feedbackClass, code: r.outcome.code,
                    invalidSince: r.outcome.invalidSince.map { min($0, now) }))
        }
        return try await store.apply(projectID: project.id, results: clamped, policy: policy, at: now)
    }

    public func clearBreaker(project: Project, channel: FeedbackChannel, confirm: Bool) async throws
        -> BreakerClearance
    {
        guard
            let cleared = try await store.clearBreaker(
                projectID: project.id, channel: channel, confirm: confirm, at: clock.now())
        else { throw RegistryError(.failedPrecondition, "the \(channel.rawValue) breaker is not tripped") }
        return cleared
    }

    public func report(project: Project) async throws -> HygieneReport {
        try await store.report(projectID: project.id, windowStart: clock.now().addingTimeInterval(-policy.window))
    }

    /// The job: retired registrations past their retention, and window counts past the window.
    public func purge(now: Date, limit: Int = 10_000) async throws -> Int {
        try await store.purgeRetired(
            before: now.addingTimeInterval(-policy.retiredRetention),
            statsBefore: now.addingTimeInterval(-policy.window - 60), limit: limit)
    }

    /// Whether a channel's window trips its breaker: the rule both stores apply.
    public static func trips(failing: Int, results: Int, policy: FeedbackPolicy) -> Bool {
        failing >= policy.breakerMinimum && Double(failing) >= policy.breakerShare * Double(max(results, 1))
    }
}
