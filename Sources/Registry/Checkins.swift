import Crypto
import Foundation

/// A device check-in: the `AidLogin <android_id>:<security_token>` identity that FirebaseMessaging on iOS (default
/// token path) and GCM clients use on the register API. It is bound to an installation by the first registration
/// made with it, so its credentials act only for that installation afterwards.
public struct DeviceCheckin: Sendable, Equatable {
    public let androidID: UInt64
    public let securityToken: UInt64

    public init(androidID: UInt64, securityToken: UInt64) {
        self.androidID = androidID
        self.securityToken = securityToken
    }
}

/// What the store keeps of a check-in (never the security token itself).
public struct StoredCheckin: Sendable, Equatable {
    public let androidID: UInt64
    public let securityTokenHash: [UInt8]
    /// The installation it registered for, once it has.
    public let projectID: String?
    public let fid: String?

    public init(androidID: UInt64, securityTokenHash: [UInt8], projectID: String?, fid: String?) {
        self.androidID = androidID
        self.securityTokenHash = securityTokenHash
        self.projectID = projectID
        self.fid = fid
    }
}

/// Storage of check-ins and of the GCM-form tokens registered with them.
public protocol CheckinStore: Sendable {
    func insert(_ checkin: StoredCheckin, at: Date) async throws
    /// Inserts a check-in bound to its installation unless that installation holds `limit` check-ins already.
    ///
    /// - Returns: false when it does; throws `.alreadyExists` when the id is taken.
    func enroll(_ checkin: StoredCheckin, at: Date, limit: Int) async throws -> Bool
    func checkin(androidID: UInt64) async throws -> StoredCheckin?
    func touch(androidID: UInt64, at: Date) async throws
    /// Binds the check-in to an installation; false when it is bound to another one already.
    func bind(androidID: UInt64, projectID: String, fid: String) async throws -> Bool
    /// Moves the check-in from the installation `previousFID` to `fid`, of the same project; false when it is not
    /// bound to `previousFID` (any more).
    func rebind(androidID: UInt64, projectID: String, fid: String, from previousFID: String) async throws -> Bool
    /// The token of a GCM-form registration (no installation: a web-push receiver), made on first use, unless the
    /// check-in holds `limit` of them already (`.resourceExhausted`).
    func gcmToken(androidID: UInt64, app: String, subtype: String, candidate: String, at: Date, limit: Int)
        async throws -> String
    /// Removes up to `limit` check-ins last seen before `cutoff` that never registered anything (no installation,
    /// no GCM-form registration).
    ///
    /// - Returns: how many were removed.
    func purgeUnused(before cutoff: Date, limit: Int) async throws -> Int
    /// Removes a GCM-form registration; the token it had, if any.
    func deleteGCMToken(androidID: UInt64, app: String, subtype: String) async throws -> String?
}

/// Check-ins and the register API's rules (`POST /checkin`, `POST /register`, `/c2dm/register3`, `/iid/register`).
public struct CheckinService: Sendable {
    let store: any CheckinStore
    let clock: any WallClock
    /// A check-in that never registered anything is removed this long after it was last seen (a device checks in
    /// again when it needs one).
    public static let unusedRetention: TimeInterval = 7 * 86_400
    /// GCM-form registrations one check-in may hold (one per app and sender a web-push receiver uses).
    public static let maxGCMRegistrations = 100
    /// Check-ins one installation may have enrolled with its auth token (a device has one; a few reinstalls keep
    /// theirs): enrolment writes without a check-in of ours, so it is bounded per installation.
    public static let maxEnrolledPerInstallation = 8

    public init(store: any CheckinStore, clock: any WallClock) {
        self.store = store
        self.clock = clock
    }

    /// A check-in. A device that sends the identity it was given keeps it; anything else gets a new one.
    public func checkIn(androidID: UInt64?, securityToken: UInt64?) async throws -> DeviceCheckin {
        let now = clock.now()
        if let androidID, let securityToken, androidID != 0,
            (try? await authenticate(androidID: androidID, securityToken: securityToken)) != nil
        {
            try await store.touch(androidID: androidID, at: now)
            return DeviceCheckin(androidID: androidID, securityToken: securityToken)
        }
        let id = try Self.random63()
        let token = try Self.random63()
        try await store.insert(
            StoredCheckin(
                androidID: id, securityTokenHash: SHA256.hash(String(token)), projectID: nil, fid: nil),
            at: now)
        return DeviceCheckin(androidID: id, securityToken: token)
    }

    /// A positive 63-bit random number (JSON clients read it as a signed 64-bit integer).
    static func random63() throws -> UInt64 {
        let bytes = try SecureRandom.bytes(8)
        let value = bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) } & 0x7fff_ffff_ffff_ffff
        return max(value, 1)
    }

    /// Checks `Authorization: AidLogin <android_id>:<security_token>`.
    ///
    /// - Throws: `.unauthenticated` for a malformed header or credentials that are not a check-in's.
    public func authenticate(aidLogin header: String?) async throws -> StoredCheckin {
        guard case let .known(stored) = try await identify(aidLogin: header) else {
            throw RegistryError(.unauthenticated, "unknown check-in credentials")
        }
        return stored
    }

    /// What an `AidLogin` header names: a check-in of this service (its token checked), or one it does not know
    /// (a device moved from Google keeps the check-in Google gave it).
    public enum Identity: Sendable {
        case known(StoredCheckin)
        case unknown(DeviceCheckin)
    }

    /// Reads `Authorization: AidLogin <android_id>:<security_token>`.
    ///
    /// - Throws: `.unauthenticated` for a malformed header, or a known check-in's id with another token.
    public func identify(aidLogin header: String?) async throws -> Identity {
        guard let header, header.hasPrefix("AidLogin "), header.utf8.count <= 128 else {
            throw RegistryError(.unauthenticated, "Authorization: AidLogin <android_id>:<security_token> is required")
        }
        let parts = header.dropFirst(9).split(separator: ":")
        guard parts.count == 2, let id = UInt64(parts[0]), let token = UInt64(parts[1]), id != 0,
            id <= UInt64(Int64.max)
        else {
            throw RegistryError(.unauthenticated, "the AidLogin credentials are malformed")
        }
        guard let stored = try await store.checkin(androidID: id) else {
            return .unknown(DeviceCheckin(androidID: id, securityToken: token))
        }
        guard ConstantTime.equals(stored.securityTokenHash, SHA256.hash(String(token))) else {
            throw RegistryError(.unauthenticated, "unknown check-in credentials")
        }
        return .known(stored)
    }

    /// Enrolls a check-in this service does not know, with the identity the device presents, bound to
    /// `installation`: the caller has proved that installation with its auth token (docs/security.md). A check-in
    /// enrolled meanwhile by a concurrent request is authenticated instead.
    public func enroll(_ device: DeviceCheckin, for installation: Installation) async throws -> StoredCheckin {
        let stored = StoredCheckin(
            androidID: device.androidID, securityTokenHash: SHA256.hash(String(device.securityToken)),
            projectID: installation.projectID, fid: installation.fid)
        do {
            guard try await store.enroll(stored, at: clock.now(), limit: Self.maxEnrolledPerInstallation) else {
                throw RegistryError(
                    .resourceExhausted,
                    "installation \(installation.fid.prefix(64)) has \(Self.maxEnrolledPerInstallation) check-ins already")
            }
            return stored
        } catch let error as RegistryError where error.kind == .alreadyExists {
            return try await authenticate(androidID: device.androidID, securityToken: device.securityToken)
        }
    }

    func authenticate(androidID: UInt64, securityToken: UInt64) async throws -> StoredCheckin {
        guard let stored = try await store.checkin(androidID: androidID),
            ConstantTime.equals(stored.securityTokenHash, SHA256.hash(String(securityToken)))
        else { throw RegistryError(.unauthenticated, "unknown check-in credentials") }
        return stored
    }

    /// Binds a check-in to the installation it registers for; a check-in acts for one installation at a time.
    ///
    /// A check-in bound to another installation of the same app moves to this one: the device's FID changed (its
    /// installation data was lost, or the app was reinstalled while the keychain kept the check-in) and it proved the
    /// new one with its auth token. `previous` is that other installation, nil when it no longer exists.
    ///
    /// - Returns: the FID the check-in moved from, nil when it did not move.
    /// - Throws: `.permissionDenied` when it is bound to an installation of another app or project.
    @discardableResult
    public func bind(_ checkin: StoredCheckin, to installation: Installation, previous: Installation? = nil)
        async throws -> String?
    {
        if checkin.projectID == installation.projectID && checkin.fid == installation.fid { return nil }
        let denied = RegistryError(.permissionDenied, "this check-in belongs to an installation of another app")
        guard let boundFID = checkin.fid, let boundProject = checkin.projectID else {
            guard
                try await store.bind(
                    androidID: checkin.androidID, projectID: installation.projectID, fid: installation.fid)
            else { throw denied }
            return nil
        }
        guard boundProject == installation.projectID, previous.map({ $0.fid == boundFID && $0.appID == installation.appID }) ?? true
        else { throw denied }
        guard
            try await store.rebind(
                androidID: checkin.androidID, projectID: installation.projectID, fid: installation.fid, from: boundFID)
        else { throw denied }
        return boundFID
    }

    /// The GCM-form registration token of a check-in, app and subtype (the same on every call).
    public func gcmToken(_ checkin: StoredCheckin, app: String, subtype: String) async throws -> String {
        try CheckinService.check(app: app, subtype: subtype)
        return try await store.gcmToken(
            androidID: checkin.androidID, app: app, subtype: subtype,
            candidate: "gcm:" + Base64URL.encode(try SecureRandom.bytes(48)), at: clock.now(),
            limit: CheckinService.maxGCMRegistrations)
    }

    public func deleteGCMToken(_ checkin: StoredCheckin, app: String, subtype: String) async throws -> String? {
        try CheckinService.check(app: app, subtype: subtype)
        return try await store.deleteGCMToken(androidID: checkin.androidID, app: app, subtype: subtype)
    }

    /// A GCM-form registration's app (a bundle or package name) and subtype (a sender ID, a scope): printable, no
    /// control characters, at most 256 bytes each.
    static func check(app: String, subtype: String) throws {
        guard !app.isEmpty, Identifiers.isPlainText(app, limit: 256) else {
            throw RegistryError.invalid("app", "must be 1 to 256 bytes of printable text")
        }
        guard !subtype.isEmpty, Identifiers.isPlainText(subtype, limit: 256) else {
            throw RegistryError.invalid("subtype", "must be 1 to 256 bytes of printable text")
        }
    }

    /// Removes check-ins unused for ``unusedRetention`` (see ``CheckinStore/purgeUnused(before:limit:)``).
    public func purgeUnused(now: Date, limit: Int = 10_000) async throws -> Int {
        try await store.purgeUnused(before: now.addingTimeInterval(-CheckinService.unusedRetention), limit: limit)
    }
}
