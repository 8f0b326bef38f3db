import Foundation

/// What adding a subscription did.
public enum SubscribeResult: Sendable, Equatable {
    case added
    case alreadyExists
    case tooManyTopics
    /// Messaging consent is off: no new subscription until it is given.
    case noConsent
    /// The installation does not exist (any more).
    case notFound

    /// The subscription rule, applied by every store under the installation's lock: an existing subscription
    /// stays; otherwise the installation must exist, have messaging consent, and hold fewer than
    /// ``Topic/maxPerInstallation`` topics.
    public static func decide(exists: Bool, subscribed: Bool, consented: Bool, count: Int) -> SubscribeResult {
        if subscribed { return .alreadyExists }
        if !exists { return .notFound }
        if !consented { return .noConsent }
        if count >= Topic.maxPerInstallation { return .tooManyTopics }
        return .added
    }
}

/// Topic subscriptions, keyed by installation (so they survive a token refresh).
public protocol TopicStore: Sendable {
    /// Adds `topic` for each FID; the result per FID.
    func add(projectID: String, fids: [String], topic: String, at: Date) async throws -> [String: SubscribeResult]
    /// Adds `topic` for one FID: the result, and when the subscription was made if it exists now (`at` when added).
    func subscribe(projectID: String, fid: String, topic: String, at: Date) async throws -> (SubscribeResult, Date?)
    /// Removes `topic` from each FID; the FIDs that had it.
    func remove(projectID: String, fids: [String], topic: String) async throws -> Set<String>
    func created(projectID: String, fid: String, topic: String) async throws -> Date?
    /// Topics of an installation in name order, after `after`, at most `limit`.
    func list(projectID: String, fid: String, after: String?, limit: Int) async throws -> [TopicSubscription]
}

extension TopicStore {
    /// ``add(projectID:fids:topic:at:)`` for one FID, then the existing subscription's time when there was one.
    public func subscribe(projectID: String, fid: String, topic: String, at: Date) async throws -> (
        SubscribeResult, Date?
    ) {
        switch try await add(projectID: projectID, fids: [fid], topic: topic, at: at)[fid] ?? .notFound {
        case .added: return (.added, at)
        case .alreadyExists: return (.alreadyExists, try await created(projectID: projectID, fid: fid, topic: topic))
        case let other: return (other, nil)
        }
    }
}

/// A topic and when the installation subscribed to it.
public struct TopicSubscription: Sendable, Equatable {
    public let topic: String
    public let createdAt: Date

    public init(topic: String, createdAt: Date) {
        self.topic = topic
        self.createdAt = createdAt
    }
}

/// The topic rules: subscriptions belong to installations (they survive a token refresh), names are normalised
/// (`/topics/` prefix dropped), and an installation holds at most ``Topic/maxPerInstallation`` topics.
public struct TopicService: Sendable {
    let store: any TopicStore
    public let clock: any WallClock

    public init(store: any TopicStore, clock: any WallClock) {
        self.store = store
        self.clock = clock
    }

    /// A topic name from a request, normalised and checked.
    public static func name(_ raw: String?, field: String) throws -> String {
        guard let raw, !raw.isEmpty else { throw RegistryError.invalid(field, "required") }
        let name = Topic.normalize(raw)
        guard Topic.isValid(name) else { throw RegistryError.invalid(field, "must match (private/)?[a-zA-Z0-9-_.~%]+, at most 900 bytes") }
        return name
    }

    /// Subscribes each installation; the result per FID.
    public func subscribe(project: Project, fids: [String], topic: String) async throws -> [String: SubscribeResult] {
        try await store.add(projectID: project.id, fids: fids, topic: topic, at: clock.now())
    }

    /// Subscribes one installation.
    ///
    /// - Returns: the subscription, new or existing.
    /// - Throws: `.failedPrecondition` when the installation holds too many topics or has no messaging consent,
    ///   `.notFound` when it is gone.
    public func subscribe(project: Project, fid: String, topic: String) async throws -> (TopicSubscription, added: Bool)
    {
        let now = clock.now()
        let (result, since) = try await store.subscribe(projectID: project.id, fid: fid, topic: topic, at: now)
        switch result {
        case .tooManyTopics: throw TopicService.tooManyTopics
        case .noConsent: throw RegistrationService.consentOff(fid)
        case .notFound: throw RegistryError(.notFound, "installation \(fid.prefix(64)) not found")
        case .added: return (TopicSubscription(topic: topic, createdAt: now), true)
        case .alreadyExists: return (TopicSubscription(topic: topic, createdAt: since ?? now), false)
        }
    }

    public static let tooManyTopics = RegistryError(
        .failedPrecondition, "the installation already holds \(Topic.maxPerInstallation) topics")

    /// Unsubscribes each installation; the FIDs that had the topic.
    public func unsubscribe(project: Project, fids: [String], topic: String) async throws -> Set<String> {
        try await store.remove(projectID: project.id, fids: fids, topic: topic)
    }

    public func subscription(project: Project, fid: String, topic: String) async throws -> TopicSubscription? {
        try await store.created(projectID: project.id, fid: fid, topic: topic).map {
            TopicSubscription(topic: topic, createdAt: $0)
        }
    }

    /// One page of an installation's topics in name order, after `after`.
    public func list(project: Project, fid: String, after: String?, limit: Int) async throws -> [TopicSubscription] {
        try await store.list(projectID: project.id, fid: fid, after: after, limit: limit)
    }

    /// Every topic of an installation (at most ``Topic/maxPerInstallation``).
    public func all(project: Project, fid: String) async throws -> [TopicSubscription] {
        var topics: [TopicSubscription] = []
        var after: String?
        while true {
            let page = try await list(project: project, fid: fid, after: after, limit: 1000)
            topics += page
            guard page.count == 1000, let last = page.last else { return topics }
            after = last.topic
        }
    }
}
