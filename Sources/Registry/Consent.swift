import Foundation

/// Who recorded a consent decision.
public enum ConsentActor: String, Sendable {
    /// The installation itself, with its auth token.
    case installation
    /// The app's backend, with a server key.
    case server
    /// The app's default at installation time.
    case `default`
}

/// The current decision for one purpose.
public struct ConsentState: Sendable, Equatable {
    public let purpose: String
    public let granted: Bool
    public let policyVersion: String?
    public let source: String?
    public let actor: ConsentActor
    public let updatedAt: Date

    public init(
        purpose: String, granted: Bool, policyVersion: String?, source: String?, actor: ConsentActor, updatedAt: Date
    ) {
        self.purpose = purpose
        self.granted = granted
        self.policyVersion = policyVersion
        self.source = source
        self.actor = actor
        self.updatedAt = updatedAt
    }
}

/// One entry of the append-only ledger.
public struct ConsentEvent: Sendable, Equatable {
    public let sequence: Int64
    public let purpose: String
    public let granted: Bool
    public let previous: Bool?
    public let actor: ConsentActor
    public let source: String?
    public let policyVersion: String?
    public let recordedAt: Date

    public init(
        sequence: Int64, purpose: String, granted: Bool, previous: Bool?, actor: ConsentActor, source: String?,
        policyVersion: String?, recordedAt: Date
    ) {
        self.sequence = sequence
        self.purpose = purpose
        self.granted = granted
        self.previous = previous
        self.actor = actor
        self.source = source
        self.policyVersion = policyVersion
        self.recordedAt = recordedAt
    }
}

/// A consent decision to record.
public struct ConsentChange: Sendable {
    public var purpose: String
    public var granted: Bool
    public var policyVersion: String?
    public var source: String?
    public var actor: ConsentActor

    public init(
        purpose: String = ConsentService.messaging, granted: Bool, policyVersion: String? = nil, source: String? = nil,
        actor: ConsentActor
    ) {
        self.purpose = purpose
        self.granted = granted
        self.policyVersion = policyVersion
        self.source = source
        self.actor = actor
    }
}

/// Storage of consent state and its ledger.
public protocol ConsentStore: Sendable {
    /// Records the change and appends it to the ledger in one transaction, serialised with every other change to
    /// the installation; withdrawing messaging consent disables its registrations in the same transaction.
    /// Returns the new state and the previous value (nil when the purpose had none); nil when the installation
    /// does not exist.
    /// A purpose the installation does not hold yet, when it holds ``ConsentService/maxPurposes`` already, is
    /// refused with ``ConsentService/tooManyPurposes`` and nothing is written (checked under the installation's lock).
    func record(projectID: String, fid: String, change: ConsentChange, at: Date) async throws -> (ConsentState, Bool?)?
    func current(projectID: String, fid: String) async throws -> [ConsentState]
    /// The installation's decision for one purpose, if it made one.
    func decision(projectID: String, fid: String, purpose: String) async throws -> ConsentState?
    /// The ledger's entries after `sequence` (0: from the start), oldest first, at most `limit`.
    func history(projectID: String, fid: String, after sequence: Int64, limit: Int) async throws -> [ConsentEvent]
}

/// The consent rules: every decision is kept, with who, when, how and under which policy.
public struct ConsentService: Sendable {
    /// The purpose that gates push registrations (`autoInitEnabled`).
    public static let messaging = "messaging"

    let store: any ConsentStore
    public let clock: any WallClock

    public init(store: any ConsentStore, clock: any WallClock) {
        self.store = store
        self.clock = clock
    }

    /// At most this many purposes an installation (docs/security.md, class 17): each is a row that every consent view
    /// reads.
    public static let maxPurposes = 32

    public static let tooManyPurposes = RegistryError(
        .failedPrecondition, "purpose: the installation already holds \(maxPurposes) consent purposes")

    /// Purposes are short lower-case names: `messaging`, `analytics`, `marketing-email` …
    public static func isValidPurpose(_ purpose: String) -> Bool {
        let bytes = Array(purpose.utf8)
        guard (1...64).contains(bytes.count), let first = bytes.first, (97...122).contains(first) else { return false }
        return bytes.allSatisfy {
            (97...122).contains($0) || (48...57).contains($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
        }
    }

    public func record(installation: Installation, change: ConsentChange) async throws -> (
        state: ConsentState, previous: Bool?
    ) {
        guard
            let result = try await store.record(
                projectID: installation.projectID, fid: installation.fid, change: change,
                at: clock.now())
        else { throw RegistryError(.notFound, "installation \(installation.fid) not found") }
        return result
    }

    public func current(installation: Installation) async throws -> [ConsentState] {
        try await store.current(projectID: installation.projectID, fid: installation.fid)
    }

    /// A page of the installation's ledger: the entries after `sequence` (0: from the start), oldest first.
    public func history(installation: Installation, after sequence: Int64 = 0, limit: Int = 1000) async throws
        -> [ConsentEvent]
    {
        try await store.history(
            projectID: installation.projectID, fid: installation.fid, after: sequence, limit: limit)
    }

    /// Whether messaging consent is on for the installation.
    public func messagingEnabled(installation: Installation) async throws -> Bool {
        try await store.decision(projectID: installation.projectID, fid: installation.fid, purpose: Self.messaging)?
            .granted ?? false
    }
}
