import Crypto
import Foundation

/// The push-registration rules: consent is the gate, tokens look like `<FID>:<opaque>`, one current token per
/// installation, topics follow the installation.
public struct RegistrationService: Sendable {
    public let registrations: any RegistrationStore
    public let topics: any TopicStore
    public let consent: ConsentService
    public let installations: InstallationService
    public let clock: any Clock

    public init(
        registrations: any RegistrationStore, topics: any TopicStore, consent: ConsentService,
        installations: InstallationService, clock: any Clock
    ) {
        self.registrations = registrations
        self.topics = topics
        self.consent = consent
        self.installations = installations
        self.clock = clock
    }

    /// A new registration token: the FID, a colon and 512 random bits (iOS treats tokens that do not start
    /// with the current FID as stale).
    public static func newToken(fid: String) throws -> String {
        fid + ":APA91b" + Base64URL.encode(try SecureRandom.bytes(64))
    }

    /// Registration tokens sent by app backends: 1–4096 characters of `[A-Za-z0-9_:.-]`.
    public static func isValidToken(_ token: String) -> Bool {
        let bytes = Array(token.utf8)
        guard (1...4096).contains(bytes.count) else { return false }
        return bytes.allSatisfy { c in
            (65...90).contains(c) || (97...122).contains(c) || (48...57).contains(c) || "_:.-".utf8.contains(c)
        }
    }

    private func requireConsent(_ installation: Installation) async throws {
        guard try await consent.messagingEnabled(installation: installation) else {
            throw RegistryError(
                .failedPrecondition,
                "messaging consent (autoInitEnabled) is off for installation \(installation.fid); record consent first")
        }
    }

    /// The client's own registration (web or iOS body): keeps its token when it has one, stamps the refresh.
    public func register(installation: Installation, template: Registration) async throws -> Registration {
        try await requireConsent(installation)
        let now = clock.now()
        let existing = try await registrations.find(projectID: installation.projectID, fid: installation.fid)
        var registration = template
        registration.projectID = installation.projectID
        registration.fid = installation.fid
        registration.token = try existing?.token ?? RegistrationService.newToken(fid: installation.fid)
        registration.state = "active"
        registration.createdAt = existing?.createdAt ?? now
        registration.refreshedAt = now
        try await installations.noteActivity(installation)
        return try await registrations.upsert(registration)
    }

    /// The token refresh callback from an app backend.
    public func refresh(project: Project, fid: String, template: Registration) async throws -> (
        Registration, RefreshOutcome
    ) {
        let now = clock.now()
        var registration = template
        registration.projectID = project.id
        registration.fid = fid
        registration.state = "active"
        registration.createdAt = now
        registration.refreshedAt = now
        switch try await registrations.refresh(registration) {
        case let .stored(stored, outcome): return (stored, outcome)
        case .installationNotFound: throw RegistryError(.notFound, "installation \(fid.prefix(64)) not found")
        case .consentOff:
            throw RegistryError(
                .failedPrecondition,
                "messaging consent (autoInitEnabled) is off for installation \(fid); record consent first")
        }
    }

    /// The registration a path names, by token or FID.
    public func find(project: Project, tokenOrFID: String) async throws -> Registration? {
        if Identifiers.isValidFID(tokenOrFID),
            let byFID = try await registrations.find(projectID: project.id, fid: tokenOrFID)
        {
            return byFID
        }
        guard RegistrationService.isValidToken(tokenOrFID) else { return nil }
        return try await registrations.find(projectID: project.id, token: tokenOrFID)
    }

    /// The installation a path names, by FID or by one of its tokens (topic routes accept both).
    public func installationFID(project: Project, tokenOrFID: String) async throws -> String? {
        if Identifiers.isValidFID(tokenOrFID), try await installations.find(project: project, fid: tokenOrFID) != nil {
            return tokenOrFID
        }
        return try await find(project: project, tokenOrFID: tokenOrFID)?.fid
    }

    public func delete(project: Project, fid: String) async throws -> Bool {
        try await registrations.delete(projectID: project.id, fid: fid)
    }

    /// Why a token may or may not be sent to.
    public func sendability(project: Project, token: String, targeting: TargetingService) async throws -> Sendability {
        guard let registration = try await find(project: project, tokenOrFID: token) else {
            let fid = token.split(separator: ":", maxSplits: 1).first.map(String.init) ?? token
            if Identifiers.isValidFID(fid), try await installations.wasDeleted(project: project, fid: fid) {
                return .deleted
            }
            return .unknownToken
        }
        guard let installation = try await installations.find(project: project, fid: registration.fid) else {
            return .deleted
        }
        return targeting.sendability(
            of: registration, messagingConsent: try await consent.messagingEnabled(installation: installation))
    }
}
