import Foundation

/// A token an installation holds for another sender (``TokenAudience/sender``).
public struct SenderTokenRecord: Sendable, Equatable {
    public let sender: String
    public let scope: String
    public let token: String
    public let createdAt: Date
    public let refreshedAt: Date

    public init(sender: String, scope: String, token: String, createdAt: Date, refreshedAt: Date) {
        self.sender = sender
        self.scope = scope
        self.token = token
        self.createdAt = createdAt
        self.refreshedAt = refreshedAt
    }
}

/// What a data-subject export reads besides the other services' own reads.
public protocol SubjectStore: Sendable {
    func senderTokens(projectID: String, fid: String) async throws -> [SenderTokenRecord]
    /// The change-feed events about the installation still retained (relayed or not yet), oldest first.
    func events(projectID: String, fid: String) async throws -> [FeedEvent]
}

/// Everything held about one installation.
public struct InstallationExport: Sendable {
    public let fid: String
    /// Nil once deleted: then only its deletion receipt is held.
    public let installation: Installation?
    public let binding: UserBinding?
    public let registration: Registration?
    public let senderTokens: [SenderTokenRecord]
    public let consents: [ConsentState]
    public let ledger: [ConsentEvent]
    public let topics: [TopicSubscription]
    public let history: [BindingEvent]
    public let events: [FeedEvent]
    public let deletion: DeletionReceipt?
}

/// Everything held about one person: each installation bound to the user, the binding history naming the user, and
/// the user's erasures.
public struct UserExport: Sendable {
    public let userID: String
    public let installations: [InstallationExport]
    public let history: [BindingEvent]
    public let erasures: [ErasureReceipt]
}

/// Data-subject exports (GDPR Art. 15 and 20): read from every service that holds data of the subject.
public struct ExportService: Sendable {
    let subjects: any SubjectStore
    let installations: InstallationService
    let registrations: RegistrationService
    let consent: ConsentService
    let topics: TopicService
    let users: UserService
    let erasures: ErasureService
    let deletions: DeletionService

    public init(
        subjects: any SubjectStore, installations: InstallationService, registrations: RegistrationService,
        consent: ConsentService, topics: TopicService, users: UserService, erasures: ErasureService,
        deletions: DeletionService
    ) {
        self.subjects = subjects
        self.installations = installations
        self.registrations = registrations
        self.consent = consent
        self.topics = topics
        self.users = users
        self.erasures = erasures
        self.deletions = deletions
    }

    /// The version of the export document's schema (`openapi.yaml`'s `SubjectExport`).
    public static let schemaVersion = "tokenregistry.subject-export/1"

    /// The installation's export; nil when the service holds nothing of the FID (never seen, or purged).
    public func installation(project: Project, fid: String) async throws -> InstallationExport? {
        guard Identifiers.isValidFID(fid) else { return nil }
        guard let installation = try await installations.find(project: project, fid: fid) else {
            guard let receipt = try await deletions.receipt(projectID: project.id, fid: fid) else { return nil }
            return InstallationExport(
                fid: fid, installation: nil, binding: nil, registration: nil, senderTokens: [], consents: [],
                ledger: [], topics: [], history: [], events: try await subjects.events(projectID: project.id, fid: fid),
                deletion: receipt)
        }
        return InstallationExport(
            fid: fid, installation: installation, binding: try await users.binding(project: project, fid: fid),
            registration: try await registrations.find(project: project, tokenOrFID: fid),
            senderTokens: try await subjects.senderTokens(projectID: project.id, fid: fid),
            consents: try await consent.current(installation: installation),
            ledger: try await consent.history(installation: installation, limit: Int(Int32.max)),
            topics: try await topics.all(project: project, fid: fid),
            history: try await users.history(project: project, fid: fid),
            events: try await subjects.events(projectID: project.id, fid: fid), deletion: nil)
    }

    /// The person's export: every installation bound to the user now, with all of the above.
    public func user(project: Project, userID: String) async throws -> UserExport {
        let outline = try await user(outline: project, userID: userID)
        var exports: [InstallationExport] = []
        for fid in outline.fids {
            if let export = try await installation(project: project, fid: fid) { exports.append(export) }
        }
        return UserExport(
            userID: userID, installations: exports, history: outline.history, erasures: outline.erasures)
    }

    /// What a person's export holds besides its installations' own exports: their FIDs (each read with
    /// ``installation(project:fid:)`` as the export is written, so it is streamed one installation at a time), the
    /// binding history naming the person, and the person's erasures.
    public func user(outline project: Project, userID: String) async throws -> (
        fids: [String], history: [BindingEvent], erasures: [ErasureReceipt]
    ) {
        (
            try await users.bindings(project: project, userID: userID).map(\.fid),
            try await users.history(project: project, userID: userID),
            try await erasures.receipts(project: project, userID: userID)
        )
    }
}
