import Crypto
import Foundation

/// What a create returns, in Firebase's terms.
public struct CreatedInstallation: Sendable {
    public let name: String
    public let fid: String
    public let refreshToken: String
    public let authToken: AuthToken
}

/// The installation rules: FIDs, refresh tokens, auth tokens, deletion.
public struct InstallationService: Sendable {
    let store: any InstallationStore
    public let tokens: TokenIssuer
    public let clock: any WallClock
    let fidHasher: FIDHasher
    /// `last_seen_at` is written at most this often per installation, not on every request.
    public var lastSeenResolution: TimeInterval = 3600

    public init(store: any InstallationStore, tokens: TokenIssuer, clock: any WallClock, fidHasher: FIDHasher) {
        self.store = store
        self.tokens = tokens
        self.clock = clock
        self.fidHasher = fidHasher
    }

    /// Creates an installation. An FID that is empty, malformed, in use or deleted before is replaced by a fresh
    /// one, which the response carries (every Firebase SDK adopts the FID the server returns).
    public func create(project: Project, app: App, requestedFID: String?, sdkVersion: String?) async throws
        -> CreatedInstallation
    {
        var candidate = try requestedFID.flatMap { Identifiers.isValidFID($0) ? $0 : nil } ?? Identifiers.newFID()
        for _ in 0..<5 {
            let refreshToken = try Identifiers.newRefreshToken()
            let now = clock.now()
            let installation = Installation(
                projectID: project.id, fid: candidate, appID: app.id,
                refreshTokenHash: SHA256.hash(refreshToken), sdkVersion: sdkVersion,
                createdAt: now, lastSeenAt: now)
            if try await store.create(
                installation, fidHash: fidHasher.hash(projectID: project.id, fid: candidate),
                initialConsent: app.autoInitDefault)
            {
                let token = try await tokens.mint(appID: app.id, fid: candidate, projectNumber: project.number)
                return CreatedInstallation(
                    name: "projects/\(project.number)/installations/\(candidate)", fid: candidate,
                    refreshToken: refreshToken, authToken: token)
            }
            candidate = try Identifiers.newFID()
        }
        throw RegistryError(.alreadyExists, "could not allocate an installation ID")
    }

    /// Checks a refresh token against the installation it claims to belong to.
    ///
    /// - Throws: `.notFound` for an unknown FID, `.unauthenticated` for a wrong token.
    public func authenticate(project: Project, fid: String, refreshToken: String) async throws -> Installation {
        guard Identifiers.isValidFID(fid), let installation = try await store.find(projectID: project.id, fid: fid)
        else {
            throw RegistryError(.notFound, "installation \(fid.prefix(64)) not found")
        }
        guard ConstantTime.equals(SHA256.hash(refreshToken), installation.refreshTokenHash) else {
            throw RegistryError(.unauthenticated, "the refresh token is not valid for this installation")
        }
        return installation
    }

    /// Mints a new auth token for an installation that proved itself with its refresh token.
    public func generateAuthToken(project: Project, fid: String, refreshToken: String) async throws -> AuthToken {
        try await generateAuthToken(
            project: project, for: authenticate(project: project, fid: fid, refreshToken: refreshToken))
    }

    /// Mints a new auth token for `installation`, which proved itself (``authenticate(project:fid:refreshToken:)``).
    ///
    /// - Parameter sdkVersion: the version the client's SDK reports with the request (every SDK sends it on each
    ///   refresh), recorded when it differs from the stored one: an app update brings a new SDK.
    public func generateAuthToken(project: Project, for installation: Installation, sdkVersion: String? = nil)
        async throws -> AuthToken
    {
        try await noteActivity(installation, sdkVersion: sdkVersion)
        return try await tokens.mint(appID: installation.appID, fid: installation.fid, projectNumber: project.number)
    }

    /// Records activity, writing only when the stored time is older than ``lastSeenResolution`` or the client reports
    /// an SDK version other than the stored one.
    public func noteActivity(_ installation: Installation, sdkVersion: String? = nil) async throws {
        let now = clock.now()
        let upgraded = sdkVersion.map { $0 != installation.sdkVersion } ?? false
        if upgraded || now.timeIntervalSince(installation.lastSeenAt) >= lastSeenResolution {
            try await store.touch(
                projectID: installation.projectID, fid: installation.fid, at: now,
                sdkVersion: upgraded ? sdkVersion : nil)
        }
    }

    /// The installation an auth token speaks for; it must still exist (a deleted installation's tokens stop at once).
    public func authenticate(project: Project, authToken: String) async throws -> Installation {
        try await installation(project: project, claims: try await tokens.verify(authToken))
    }

    /// The installation a valid auth token speaks for, or nil when the token is valid but its installation was deleted
    /// (the SDKs keep the token up to 7 days and never refresh it on a 401: a clean-up call made with it, a
    /// registration's delete, finds nothing left to delete rather than a refusal).
    public func authenticateOrGone(project: Project, authToken: String) async throws -> (fid: String, Installation?) {
        let claims = try await tokens.verify(authToken)
        try Self.require(claims, of: project)
        return (claims.fid, try await store.find(projectID: project.id, fid: claims.fid))
    }

    private static func require(_ claims: AuthClaims, of project: Project) throws {
        guard claims.projectNumber == project.number else {
            throw RegistryError(.permissionDenied, "the auth token belongs to another project")
        }
    }

    /// The installation verified auth token claims speak for (``authenticate(project:authToken:)`` once the token is
    /// verified: for callers that needed the claims first, to find the project).
    public func installation(project: Project, claims: AuthClaims) async throws -> Installation {
        try Self.require(claims, of: project)
        guard let installation = try await store.find(projectID: project.id, fid: claims.fid) else {
            throw RegistryError(.unauthenticated, "the installation of this auth token no longer exists")
        }
        return installation
    }

    public func find(project: Project, fid: String) async throws -> Installation? {
        guard Identifiers.isValidFID(fid) else { return nil }
        return try await store.find(projectID: project.id, fid: fid)
    }

    /// Deletes an installation and retires its FID.
    ///
    /// - Parameter idleBefore: delete only if the installation was last seen before this time (expiry).
    /// - Returns: false when there was no such installation.
    public func delete(
        projectID: String, fid: String, reason: DeletionReason, idleBefore: Date? = nil, traceparent: String? = nil
    ) async throws -> Bool {
        guard Identifiers.isValidFID(fid) else { return false }
        let now = clock.now()
        return try await store.delete(
            DeletionRequest(
                projectID: projectID, fid: fid, fidHash: fidHasher.hash(projectID: projectID, fid: fid), reason: reason,
                requestedAt: now, deadline: now.addingTimeInterval(DeletionReason.deadline), idleBefore: idleBefore,
                traceparent: traceparent))
    }

    /// The FIDs among `fids` that are live installations of the project.
    public func existing(project: Project, fids: [String]) async throws -> Set<String> {
        try await store.existing(projectID: project.id, fids: fids.filter(Identifiers.isValidFID))
    }

    /// True when the FID was deleted before.
    public func wasDeleted(project: Project, fid: String) async throws -> Bool {
        try await store.isRetired(projectID: project.id, fidHash: fidHasher.hash(projectID: project.id, fid: fid))
    }
}
