import Crypto
import Foundation

/// A person's erasure as the store runs it: every installation of the user deleted, and the user's clear ID cleared
/// from the binding history, in one transaction under the user's lock.
public struct ErasureRequest: Sendable {
    public let projectID: String
    public let erasureID: String
    public let userID: String
    public let userHash: [UInt8]
    public let requestedAt: Date
    public let deadline: Date
    public let traceparent: String?
    /// The keyed hash of each FID the erasure deletes.
    public let fidHash: @Sendable (String) -> [UInt8]
}

/// One installation of an erasure: its deletion record while it is kept, the outcome copied from it once purged.
public struct ErasureMember: Sendable, Equatable {
    public let deletionID: Int64
    public let fidHash: [UInt8]
    /// The live deletion record (its FID in clear for the audit period), or the overdue one known by its hash.
    public let deletion: DeletionRecord?
    /// Once the record was purged: how it ended, when, and each service's part.
    public let purgedState: ReceiptState?
    public let completedAt: Date?
    public let purgedServices: [DeliveryStatus]

    public init(
        deletionID: Int64, fidHash: [UInt8], deletion: DeletionRecord?, purgedState: ReceiptState?, completedAt: Date?,
        purgedServices: [DeliveryStatus]
    ) {
        self.deletionID = deletionID
        self.fidHash = fidHash
        self.deletion = deletion
        self.purgedState = purgedState
        self.completedAt = completedAt
        self.purgedServices = purgedServices
    }

    public func state(at now: Date) -> ReceiptState {
        if let deletion { return deletion.state(at: now) }
        return purgedState ?? .done
    }

    public var services: [DeliveryStatus] { deletion?.services ?? purgedServices }
}

/// An erasure as stored.
public struct ErasureRecord: Sendable, Equatable {
    public let id: String
    public let userHash: [UInt8]
    public let requestedAt: Date
    public let deadline: Date
    public let members: [ErasureMember]

    public init(id: String, userHash: [UInt8], requestedAt: Date, deadline: Date, members: [ErasureMember]) {
        self.id = id
        self.userHash = userHash
        self.requestedAt = requestedAt
        self.deadline = deadline
        self.members = members
    }

    /// Overdue when any installation is; pending while any is; done when all are (or there were none).
    public func state(at now: Date) -> ReceiptState {
        let states = members.map { $0.state(at: now) }
        if states.contains(.overdue) { return .overdue }
        if states.contains(.pending) { return .pending }
        return .done
    }
}

/// The person's receipt: the erasure, and the installations bound to the same user ID since (never swept in
/// silently: an erasure deletes what was bound when it ran, and names what came after).
public struct ErasureReceipt: Sendable, Equatable {
    public let record: ErasureRecord
    public let state: ReceiptState
    public let boundAfter: [UserBinding]
    /// When it was read: the states are at this time.
    public let at: Date
}

/// Erasures by person; the store side of ``ErasureService``.
public protocol ErasureStore: Sendable {
    /// Runs the erasure; the record it made.
    func erase(_ request: ErasureRequest) async throws -> ErasureRecord
    func erasure(projectID: String, id: String) async throws -> ErasureRecord?
    /// The erasures of the user the hash names, oldest first.
    func erasures(projectID: String, userHash: [UInt8]) async throws -> [ErasureRecord]
}

/// Data-subject requests for a person: erase, and the receipt of an erasure.
public struct ErasureService: Sendable {
    let store: any ErasureStore
    let users: UserService
    public let clock: any WallClock
    let fidHasher: FIDHasher

    public init(store: any ErasureStore, users: UserService, clock: any WallClock, fidHasher: FIDHasher) {
        self.store = store
        self.users = users
        self.clock = clock
        self.fidHasher = fidHasher
    }

    /// Erasure IDs: `er_` and 22 characters of randomness.
    public static func isValidID(_ id: String) -> Bool {
        id.hasPrefix("er_") && id.utf8.count == 25
            && id.utf8.dropFirst(3).allSatisfy {
                (65...90).contains($0) || (97...122).contains($0) || (48...57).contains($0) || $0 == 45 || $0 == 95
            }
    }

    /// Deletes every installation of the user, with the guarantees of an installation deletion (each is a deletion
    /// with reason `erasure`: fanned out to every linked service, 180-day deadline, purged to keyed hashes).
    public func erase(project: Project, userID raw: String, traceparent: String? = nil) async throws -> ErasureReceipt {
        let userID = try UserService.validate(userID: raw)
        let now = clock.now()
        let hasher = fidHasher
        let projectID = project.id
        let record = try await store.erase(
            ErasureRequest(
                projectID: project.id, erasureID: "er_" + Base64URL.encode(try SecureRandom.bytes(16)),
                userID: userID, userHash: users.userHash(projectID: project.id, userID: userID), requestedAt: now,
                deadline: now.addingTimeInterval(DeletionReason.deadline), traceparent: traceparent,
                fidHash: { hasher.hash(projectID: projectID, fid: $0) }))
        return try await receipt(project: project, record: record)
    }

    public func receipt(project: Project, id: String) async throws -> ErasureReceipt? {
        guard Self.isValidID(id), let record = try await store.erasure(projectID: project.id, id: id) else {
            return nil
        }
        return try await receipt(project: project, record: record)
    }

    /// The user's erasures, as receipts.
    public func receipts(project: Project, userID: String) async throws -> [ErasureReceipt] {
        var receipts: [ErasureReceipt] = []
        let userID = try UserService.validate(userID: userID)
        for record in try await store.erasures(
            projectID: project.id, userHash: users.userHash(projectID: project.id, userID: userID))
        {
            receipts.append(try await receipt(project: project, record: record))
        }
        return receipts
    }

    private func receipt(project: Project, record: ErasureRecord) async throws -> ErasureReceipt {
        let now = clock.now()
        return ErasureReceipt(
            record: record, state: record.state(at: now),
            boundAfter: try await users.store.bindings(projectID: project.id, userHash: record.userHash), at: now)
    }
}
