import Crypto
import Foundation

/// A service that holds installation data and must hear of every deletion.
public struct LinkedService: Sendable, Equatable {
    public let name: String
    public let endpoint: String
    public let createdAt: Date

    public init(name: String, endpoint: String, createdAt: Date) {
        self.name = name
        self.endpoint = endpoint
        self.createdAt = createdAt
    }
}

/// Who knows a linked service's secret: the project, when a server-key call handed it out (at creation, or a re-key
/// by the project), or the service alone, when the service asked for it with a rotation signed by its current one.
public enum SecretHolder: String, Sendable, Equatable {
    case project
    case service
}

/// A secret in force for a linked service, and who holds it.
public struct LinkedServiceSecret: Sendable, Equatable {
    public let secret: String
    public let holder: SecretHolder

    public init(_ secret: String, holder: SecretHolder) {
        self.secret = secret
        self.holder = holder
    }
}

/// A linked service's secrets in force (current first) and when the project last re-keyed it, if ever.
public struct LinkedServiceKeys: Sendable, Equatable {
    public let secrets: [LinkedServiceSecret]
    public let rekeyedByProjectAt: Date?

    public init(secrets: [LinkedServiceSecret], rekeyedByProjectAt: Date?) {
        self.secrets = secrets
        self.rekeyedByProjectAt = rekeyedByProjectAt
    }
}

/// What an acknowledgement did to its delivery.
public enum AcknowledgeOutcome: Sendable, Equatable {
    /// The delivery was pending or accepted and is now acknowledged.
    case acknowledged
    /// It was already acknowledged (a retried acknowledgement): nothing changed.
    case alreadyAcknowledged
    /// No delivery of this deletion to the service with that delivery id is on record.
    case notFound
    /// The delivery is closed another way (abandoned: the service was removed); an acknowledgement cannot reopen it.
    case closed(DeliveryState)
}

/// One service's part of a deletion receipt.
public struct DeliveryStatus: Sendable, Equatable {
    public let service: String
    public let state: DeliveryState
    public let attempts: Int
    public let lastError: String?
    public let acknowledgedAt: Date?
    /// When the project had last re-keyed the service (a secret it could sign with) before it acknowledged, or, while
    /// unacknowledged, at all: the receipt says so, since the project then knew a secret that signs.
    public let rekeyedByProjectAt: Date?

    public init(
        service: String, state: DeliveryState, attempts: Int, lastError: String?, acknowledgedAt: Date?,
        rekeyedByProjectAt: Date? = nil
    ) {
        self.service = service
        self.state = state
        self.attempts = attempts
        self.lastError = lastError
        self.acknowledgedAt = acknowledgedAt
        self.rekeyedByProjectAt = rekeyedByProjectAt
    }
}

/// A deletion as stored: live (its FID still in clear, for the audit period) or purged at its deadline with
/// services unacknowledged (known only by the FID's keyed hash).
public struct DeletionRecord: Sendable, Equatable {
    public let id: Int64
    public let fid: String?
    public let fidHash: [UInt8]
    public let reason: DeletionReason
    public let requestedAt: Date
    public let deadline: Date
    public let completedAt: Date?
    public let purged: Bool
    public let services: [DeliveryStatus]

    public init(
        id: Int64, fid: String?, fidHash: [UInt8], reason: DeletionReason, requestedAt: Date, deadline: Date,
        completedAt: Date?, purged: Bool, services: [DeliveryStatus]
    ) {
        self.id = id
        self.fid = fid
        self.fidHash = fidHash
        self.reason = reason
        self.requestedAt = requestedAt
        self.deadline = deadline
        self.completedAt = completedAt
        self.purged = purged
        self.services = services
    }

    /// The receipt's state at `now`: done once every service confirmed; overdue once the deadline passed first.
    public func state(at now: Date) -> ReceiptState {
        if purged { return .overdue }
        if completedAt != nil { return .done }
        return now >= deadline ? .overdue : .pending
    }
}

/// The proof of a deletion: what was asked, by when, and which services confirmed.
public struct DeletionReceipt: Sendable, Equatable {
    public let id: Int64
    public let fid: String?
    public let fidHash: String
    public let reason: DeletionReason
    public let requestedAt: Date
    public let deadline: Date
    public let state: ReceiptState
    public let services: [DeliveryStatus]

    init(_ record: DeletionRecord, at now: Date) {
        id = record.id
        fid = record.fid
        fidHash = Hex.encode(record.fidHash)
        reason = record.reason
        requestedAt = record.requestedAt
        deadline = record.deadline
        state = record.state(at: now)
        services = record.services
    }
}

/// Storage of linked services, deletion records and acknowledgements.
public protocol DeletionStore: Sendable {
    /// Adds a service whose first secret the project holds, unless the project has `limit` services already.
    ///
    /// - Returns: false when the project already has a service of that name.
    /// - Throws: `.resourceExhausted` when the project has `limit` services.
    func addLinkedService(projectID: String, service: LinkedService, secret: String, limit: Int) async throws -> Bool
    func linkedServices(projectID: String) async throws -> [LinkedService]
    /// Removes a service; its unconfirmed deliveries become `abandoned`, and a deletion left with none open
    /// completes at `at`.
    func removeLinkedService(projectID: String, name: String, at: Date) async throws -> Bool
    /// The secrets a service's signatures may be made with at `at` (current first); nil for no such service.
    func linkedServiceSecrets(projectID: String, name: String, at: Date) async throws -> LinkedServiceKeys?
    /// Replaces a service's secret with one `holder` holds; the old one stays valid until `previousUntil`. A
    /// `.project` holder records `at` as the service's re-key by the project. False for no such service.
    func rotateSecret(
        projectID: String, name: String, secret: String, holder: SecretHolder, previousUntil: Date, at: Date
    ) async throws -> Bool
    /// The live deletion record of a FID, or the purged one known by its hash.
    func deletion(projectID: String, fid: String, fidHash: [UInt8]) async throws -> DeletionRecord?
    /// Records in the given state at `now`, in id order after `afterID`.
    func deletions(projectID: String, state: ReceiptState, at now: Date, afterID: Int64, limit: Int) async throws
        -> [DeletionRecord]
    /// Marks the service's delivery `deliveryID` confirmed when it is pending or accepted (recording the service's
    /// re-key by the project, if any); completes the deletion when it was the last.
    func acknowledge(projectID: String, fid: String, service: String, deliveryID: String, at: Date) async throws
        -> AcknowledgeOutcome
}

/// Timing of the deletion machinery; every value is configurable.
public struct DeletionPolicy: Sendable {
    /// Back-off between delivery attempts: `base` doubling to `max`, with ±20 % jitter.
    public var backoffBase: TimeInterval = 1
    public var backoffMax: TimeInterval = 3600
    /// How long a claimed delivery stays with its worker before another may retry it.
    public var lease: TimeInterval = 60
    /// How long a completed deletion's record stays for audit (never past its deadline).
    public var auditPeriod: TimeInterval = 30 * 86_400
    /// Idle installations are deleted after this.
    public var expireAfter: TimeInterval = 270 * 86_400
    /// Change-feed events are kept this long.
    public var eventRetention: TimeInterval = 7 * 86_400
    /// How long one jobs run goes on delivering due notices, batch after batch.
    public var deliveryRunBudget: TimeInterval = 5
    /// Where notices may go: never inside the network unless allowed (and only to listed hosts, when listed).
    public var endpoints = EndpointPolicy()
    /// Linked services a project may have.
    public var maxLinkedServices = 20
    /// Deliveries of one project in flight at once on a replica (and at most this many in one claim): one project's
    /// backlog, or its endpoints that never answer, never take the delivery window.
    public var deliveriesPerProject = 4

    public init() {}

    /// The delay before attempt `attempts + 1`.
    public func backoff(afterAttempts attempts: Int) -> TimeInterval {
        let exponent = Double(max(0, min(attempts - 1, 40)))
        let delay = min(backoffMax, backoffBase * pow(2, exponent))
        return delay * Double.random(in: 0.8...1.2)
    }
}

/// Linked services, deletion receipts, acknowledgements.
public struct DeletionService: Sendable {
    let store: any DeletionStore
    /// Where receipts are read: `store`, or the same data on a read replica.
    let receipts: any DeletionStore
    public let clock: any WallClock
    public let policy: DeletionPolicy
    let fidHasher: FIDHasher
    let resolver: any HostResolver

    public init(
        store: any DeletionStore, receipts: (any DeletionStore)? = nil, clock: any WallClock, policy: DeletionPolicy,
        fidHasher: FIDHasher, resolver: any HostResolver
    ) {
        self.store = store
        self.receipts = receipts ?? store
        self.clock = clock
        self.policy = policy
        self.fidHasher = fidHasher
        self.resolver = resolver
    }

    // MARK: - Linked services

    public static func isValidServiceName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...63).contains(bytes.count), let first = bytes.first, (97...122).contains(first) else { return false }
        return bytes.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == UInt8(ascii: "-") }
    }

    /// What a project past its linked services is answered (the stores answer the same under their lock).
    static func tooManyServices(_ limit: Int) -> RegistryError {
        RegistryError(.resourceExhausted, "a project may have at most \(limit) linked services", field: "name")
    }

    /// How long a rotated-out secret keeps signing and verifying.
    public static let secretOverlap: TimeInterval = 86_400

    static func newSecret() throws -> String { "whsec_" + Base64URL.encode(try SecureRandom.bytes(32)) }

    /// Registers a service; returns it and its signing secret (shown once).
    public func addLinkedService(projectID: String, name: String, endpoint: String) async throws -> (
        LinkedService, String
    ) {
        guard DeletionService.isValidServiceName(name) else {
            throw RegistryError.invalid("name", "1-63 lower-case letters, digits and hyphens, starting with a letter")
        }
        // What the store would refuse anyway is refused before the name is looked up: a look-up can take the
        // resolver's whole time-out, and a request bound to fail must not hold one of the project's look-ups.
        let existing = try await store.linkedServices(projectID: projectID)
        if existing.contains(where: { $0.name == name }) {
            throw RegistryError(.alreadyExists, "linked service \(name) already exists")
        }
        if existing.count >= policy.maxLinkedServices { throw DeletionService.tooManyServices(policy.maxLinkedServices) }
        // Refused when the host is, or resolves to, an address inside; a name that does not resolve now is checked
        // again at every delivery, after resolution, against the address actually connected to.
        do {
            _ = try await policy.endpoints.addresses(of: try Endpoint(endpoint), resolver: resolver, for: projectID)
        } catch let error as RegistryError where error.kind == .invalidArgument {
            throw error
        } catch {}
        let secret = try DeletionService.newSecret()
        let service = LinkedService(name: name, endpoint: endpoint, createdAt: clock.now())
        guard
            try await store.addLinkedService(
                projectID: projectID, service: service, secret: secret, limit: policy.maxLinkedServices)
        else {
            throw RegistryError(.alreadyExists, "linked service \(name) already exists")
        }
        return (service, secret)
    }

    public func linkedServices(projectID: String) async throws -> [LinkedService] {
        try await store.linkedServices(projectID: projectID)
    }

    /// The project re-keys a service (it lost its secret): a new secret, shown to the server-key holder once. For
    /// ``secretOverlap`` the old one keeps working: notices carry both signatures and acknowledgements may use either;
    /// deliveries under way are kept. The project now knows a secret that signs, so acknowledgements need the
    /// service's own rotation again, and every receipt entry of the service from now on says when the project re-keyed
    /// it.
    ///
    /// - Returns: the new secret and until when the old one works; nil for no such service.
    public func rotateSecret(projectID: String, name: String) async throws -> (secret: String, previousUntil: Date)? {
        guard DeletionService.isValidServiceName(name) else { return nil }
        return try await rotate(projectID: projectID, name: name, holder: .project)
    }

    func rotate(projectID: String, name: String, holder: SecretHolder) async throws -> (
        secret: String, previousUntil: Date
    )? {
        let secret = try DeletionService.newSecret()
        let now = clock.now()
        let until = now.addingTimeInterval(DeletionService.secretOverlap)
        guard
            try await store.rotateSecret(
                projectID: projectID, name: name, secret: secret, holder: holder, previousUntil: until, at: now)
        else { return nil }
        return (secret, until)
    }

    /// The wall clock in whole seconds, as signatures carry it (the receiver checks them against its own).
    static func wallClockSeconds() -> Int64 { ClientNumbers.unixSeconds(Date()) }

    /// Removes a service; its open deliveries read `abandoned` (it will not confirm them).
    public func removeLinkedService(projectID: String, name: String) async throws -> Bool {
        guard DeletionService.isValidServiceName(name) else { return false }
        return try await store.removeLinkedService(projectID: projectID, name: name, at: clock.now())
    }

    // MARK: - Receipts

    public func receipt(projectID: String, fid: String) async throws -> DeletionReceipt? {
        guard Identifiers.isValidFID(fid) else { return nil }
        let record = try await receipts.deletion(
            projectID: projectID, fid: fid, fidHash: fidHasher.hash(projectID: projectID, fid: fid))
        return record.map { DeletionReceipt($0, at: clock.now()) }
    }

    /// Receipts in `state`, in id order after `afterID`.
    public func receipts(projectID: String, state: ReceiptState, afterID: Int64, limit: Int) async throws
        -> [DeletionReceipt]
    {
        let now = clock.now()
        return try await receipts.deletions(
            projectID: projectID, state: state, at: now, afterID: afterID, limit: limit
        )
        .map { DeletionReceipt($0, at: now) }
    }
}
