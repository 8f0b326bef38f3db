import Foundation

/// An installation bound to the app's own user ID.
public struct UserBinding: Sendable, Equatable {
    public let fid: String
    public let userID: String
    public let boundAt: Date

    public init(fid: String, userID: String, boundAt: Date) {
        self.fid = fid
        self.userID = userID
        self.boundAt = boundAt
    }
}

/// What a bind did to the installation's binding.
public enum BindingChange: Sendable, Equatable {
    /// It had no user.
    case bound
    /// It had this user already: nothing changed.
    case unchanged
    /// It had another user, which it left (a login on a shared device).
    case moved(from: String)
}

/// A bind's outcome: the binding now, what changed, and the installations the user's cap unbound to make room.
public struct BindResult: Sendable, Equatable {
    public let binding: UserBinding
    public let change: BindingChange
    public let displaced: [String]

    public init(binding: UserBinding, change: BindingChange, displaced: [String]) {
        self.binding = binding
        self.change = change
        self.displaced = displaced
    }
}

/// One entry of an installation's binding history.
public enum BindingAction: String, Sendable {
    case bound
    case moved
    case unbound
    /// Unbound to make room under the user's cap (``UserPolicy/Overflow/unbindLeastRecentlySeen``).
    case displaced
}

/// An entry of the binding history, as a subject's export shows it: a user ID that was erased since reads nil.
public struct BindingEvent: Sendable, Equatable {
    public let fid: String
    public let action: BindingAction
    public let userID: String?
    public let userHash: [UInt8]
    public let previousUserID: String?
    public let previousUserHash: [UInt8]?
    public let at: Date

    public init(
        fid: String, action: BindingAction, userID: String?, userHash: [UInt8], previousUserID: String?,
        previousUserHash: [UInt8]?, at: Date
    ) {
        self.fid = fid
        self.action = action
        self.userID = userID
        self.userHash = userHash
        self.previousUserID = previousUserID
        self.previousUserHash = previousUserHash
        self.at = at
    }
}

/// How many installations one user may have, and what a bind past that does.
public struct UserPolicy: Sendable {
    public enum Overflow: String, Sendable, CaseIterable {
        /// The bind is refused (429 `RESOURCE_EXHAUSTED`); the user's other installations stay.
        case refuse
        /// The user's least recently seen installation is unbound (recorded as `displaced`), then the bind is made.
        case unbindLeastRecentlySeen = "unbind-least-recent"
    }

    /// Installations one user may have bound at once.
    public var maxInstallationsPerUser = 100
    public var overflow = Overflow.refuse
    /// The most `maxInstallationsPerUser` may be configured to (a person's reads and erasure stay bounded).
    public static let maxInstallationsLimit = 1000
    /// Users one `targets:resolve` may name.
    public static let maxUsersPerResolve = 1000

    public init() {}
}

/// A bind as the store runs it, under the locks of the users it touches.
public struct BindingRequest: Sendable {
    public let projectID: String
    public let fid: String
    public let userID: String
    public let userHash: [UInt8]
    public let at: Date
    public let policy: UserPolicy
}

/// Storage of user bindings and their history.
public protocol UserStore: Sendable {
    /// Binds (or moves) the installation, in one transaction holding the locks of the user it leaves and the one it
    /// joins, so a concurrent login, logout or erasure of either queues behind it. Applies the cap under the lock.
    ///
    /// - Returns: nil when the installation does not exist.
    /// - Throws: `.resourceExhausted` when the user is at the cap and the policy refuses.
    func bind(_ request: BindingRequest) async throws -> BindResult?
    /// Unbinds the installation under its user's lock; the binding it had, if any.
    func unbind(projectID: String, fid: String, at: Date) async throws -> UserBinding?
    func binding(projectID: String, fid: String) async throws -> UserBinding?
    /// The user's installations, in FID order.
    func bindings(projectID: String, userID: String) async throws -> [UserBinding]
    /// The installations bound now to the user the hash names (those bound after its erasure, on a receipt).
    func bindings(projectID: String, userHash: [UInt8]) async throws -> [UserBinding]
    /// The installation's binding history, oldest first.
    func history(projectID: String, fid: String) async throws -> [BindingEvent]
    /// Every history entry naming the user (as the one bound, or the one left), oldest first.
    func history(projectID: String, userHash: [UInt8]) async throws -> [BindingEvent]
}

/// Users and their installations: binding, moving, unbinding, reading.
public struct UserService: Sendable {
    let store: any UserStore
    let installations: InstallationService
    public let clock: any WallClock
    public let policy: UserPolicy
    let hasher: FIDHasher

    public init(
        store: any UserStore, installations: InstallationService, clock: any WallClock, policy: UserPolicy,
        hasher: FIDHasher
    ) {
        self.store = store
        self.installations = installations
        self.clock = clock
        self.policy = policy
        self.hasher = hasher
    }

    /// User IDs are the app's own: opaque, printable, at most this many characters (Unicode scalars, as JSON Schema's
    /// `maxLength` counts them; so at most 512 bytes).
    public static let maxUserIDLength = 128
    /// In bytes, the most a user ID can take (for buffers and field limits).
    public static let maxUserIDBytes = 512

    /// The ID as stored: checked, and in Unicode normalization form C. One spelling per ID: PostgreSQL and the keyed
    /// hash compare bytes and Swift strings compare canonically, so a decomposed spelling would be two users to one
    /// and one to the other; normalised, every spelling of a name is the same user.
    ///
    /// - Throws: `.invalidArgument` naming `field`.
    @discardableResult
    public static func validate(userID raw: String, field: String = "userId") throws -> String {
        guard Identifiers.isPlainText(raw), !raw.utf8.contains(0) else {
            throw RegistryError.invalid(field, "must not contain control characters")
        }
        let userID = raw.precomposedStringWithCanonicalMapping
        guard (1...maxUserIDLength).contains(userID.unicodeScalars.count) else {
            throw RegistryError.invalid(field, "1-\(maxUserIDLength) characters")
        }
        // The paths' custom verbs: `/users/<id>:export` could never name a user whose ID ends so.
        guard !userID.hasSuffix(":erase"), !userID.hasSuffix(":export") else {
            throw RegistryError.invalid(field, "must not end in :erase or :export")
        }
        return userID
    }

    /// The user ID's keyed hash: what erasures and audit entries keep once the clear ID is gone.
    public func userHash(projectID: String, userID: String) -> [UInt8] {
        hasher.hash(projectID: projectID, fid: "user:" + userID)
    }

    /// Binds the installation to `userID` (a move when it had another user).
    ///
    /// - Throws: `.notFound` for no such installation; `.resourceExhausted` at the cap under ``UserPolicy/Overflow/refuse``.
    public func bind(project: Project, fid: String, userID raw: String) async throws -> BindResult {
        let userID = try Self.validate(userID: raw)
        guard Identifiers.isValidFID(fid),
            let result = try await store.bind(
                BindingRequest(
                    projectID: project.id, fid: fid, userID: userID,
                    userHash: userHash(projectID: project.id, userID: userID), at: clock.now(), policy: policy))
        else { throw RegistryError(.notFound, "installation \(fid.prefix(64)) not found") }
        return result
    }

    /// Unbinds the installation (a logout); the binding it had, nil when it had none.
    ///
    /// - Throws: `.notFound` for no such installation.
    public func unbind(project: Project, fid: String) async throws -> UserBinding? {
        try await requireInstallation(project: project, fid: fid)
        guard let removed = try await store.unbind(projectID: project.id, fid: fid, at: clock.now()) else {
            // Nothing was bound, or the installation went while the unbind waited (an erasure of its user).
            try await requireInstallation(project: project, fid: fid)
            return nil
        }
        return removed
    }

    public func binding(project: Project, fid: String) async throws -> UserBinding? {
        guard Identifiers.isValidFID(fid) else { return nil }
        return try await store.binding(projectID: project.id, fid: fid)
    }

    public func bindings(project: Project, userID: String) async throws -> [UserBinding] {
        try await store.bindings(projectID: project.id, userID: try Self.validate(userID: userID))
    }

    public func history(project: Project, fid: String) async throws -> [BindingEvent] {
        try await store.history(projectID: project.id, fid: fid)
    }

    public func history(project: Project, userID: String) async throws -> [BindingEvent] {
        try await store.history(
            projectID: project.id, userHash: userHash(projectID: project.id, userID: try Self.validate(userID: userID)))
    }

    @discardableResult
    public func requireInstallation(project: Project, fid: String) async throws -> Installation {
        guard let installation = try await installations.find(project: project, fid: fid) else {
            throw RegistryError(.notFound, "installation \(fid.prefix(64)) not found")
        }
        return installation
    }
}
