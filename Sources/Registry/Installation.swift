import Foundation

/// One app installation (FID) and the hash of its refresh token.
public struct Installation: Sendable, Equatable {
    public let projectID: String
    public let fid: String
    public let appID: String
    public let refreshTokenHash: [UInt8]
    public let sdkVersion: String?
    public let createdAt: Date
    public let lastSeenAt: Date

    public init(
        projectID: String, fid: String, appID: String, refreshTokenHash: [UInt8], sdkVersion: String?,
        createdAt: Date, lastSeenAt: Date
    ) {
        self.projectID = projectID
        self.fid = fid
        self.appID = appID
        self.refreshTokenHash = refreshTokenHash
        self.sdkVersion = sdkVersion
        self.createdAt = createdAt
        self.lastSeenAt = lastSeenAt
    }
}

/// Storage of installations.
public protocol InstallationStore: Sendable {
    /// Inserts the installation with its initial messaging consent (recorded in the ledger as the app default).
    ///
    /// - Returns: false when the FID is taken: live in the project, or retired by a deletion.
    func create(_ installation: Installation, fidHash: [UInt8], initialConsent: Bool) async throws -> Bool
    func find(projectID: String, fid: String) async throws -> Installation?
    /// Moves the installation's last-seen time forward to `at` (never back) and, when `sdkVersion` is given, records
    /// the SDK version the client now reports (its upgrades).
    func touch(projectID: String, fid: String, at: Date, sdkVersion: String?) async throws
    /// Removes the installation and everything keyed by it, retires the FID, records the deletion with its
    /// deadline and queues one delivery per linked service, in one transaction. A deletion with no linked service
    /// to tell is complete at once.
    ///
    /// - Parameter idleBefore: when set, only an installation last seen before this time is deleted (expiry must
    ///   not delete one that came back since it was picked).
    /// - Returns: false when there was no such installation (or it was not idle).
    func delete(_ request: DeletionRequest) async throws -> Bool
    /// The FIDs among `fids` that are live installations of the project (one query for a batch).
    func existing(projectID: String, fids: [String]) async throws -> Set<String>
    /// True when this FID was deleted before (it is never handed out again).
    func isRetired(projectID: String, fidHash: [UInt8]) async throws -> Bool
    /// Installations last seen before `cutoff`, oldest first, at most `limit`.
    func idle(before cutoff: Date, limit: Int) async throws -> [(projectID: String, fid: String)]
}

/// One deletion, as the store carries it out.
public struct DeletionRequest: Sendable {
    public let projectID: String
    public let fid: String
    public let fidHash: [UInt8]
    public let reason: DeletionReason
    public let requestedAt: Date
    public let deadline: Date
    public let idleBefore: Date?
    /// The W3C `traceparent` of the request that asked for it, passed on in its notices (nil for the jobs' own).
    public var traceparent: String? = nil

    public init(
        projectID: String, fid: String, fidHash: [UInt8], reason: DeletionReason, requestedAt: Date, deadline: Date,
        idleBefore: Date?, traceparent: String? = nil
    ) {
        self.projectID = projectID
        self.fid = fid
        self.fidHash = fidHash
        self.reason = reason
        self.requestedAt = requestedAt
        self.deadline = deadline
        self.idleBefore = idleBefore
        self.traceparent = traceparent
    }
}

/// Why an installation was deleted.
public enum DeletionReason: String, Sendable {
    /// The installation deleted itself (its refresh token).
    case client
    /// The app's backend deleted it (server key, admin SDK).
    case server
    /// It was idle longer than the expiry period.
    case inactivity
    /// The person it was bound to was erased (``ErasureService``).
    case erasure

    /// Everything of a deleted FID is gone this long after the request (Firebase's promise: 180 days).
    public static let deadline: TimeInterval = 180 * 86_400
}
