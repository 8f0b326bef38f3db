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
    /// The change-feed events about the installation still retained and relayed, after `sequence` (0: from the
    /// start), in feed order, at most `limit`.
    func events(projectID: String, fid: String, after sequence: Int64, limit: Int) async throws -> [FeedEvent]
    /// Its events not yet relayed (sequence 0) after the outbox's `id` (0: from the first), oldest first, at most
    /// `limit`, each with its place in the outbox.
    func pendingEvents(projectID: String, fid: String, after id: Int64, limit: Int) async throws
        -> [(id: Int64, event: FeedEvent)]
}

/// Everything held about one installation.
public struct InstallationExport: Sendable {
    public let projectID: String
    public let fid: String
    /// Nil once deleted: then only its deletion receipt is held.
    public let installation: Installation?
    public let binding: UserBinding?
    public let registration: Registration?
    public let senderTokens: [SenderTokenRecord]
    public let consents: [ConsentState]
    public let topics: [TopicSubscription]
    public let history: [BindingEvent]
    public let deletion: DeletionReceipt?
    // The consent ledger and the change-feed events grow with what the installation does, without a bound: they are
    // not held here but read a page at a time as the export is written (``ExportService/ledger(of:after:)``,
    // ``ExportService/events(of:after:)``).
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
                projectID: project.id, fid: fid, installation: nil, binding: nil, registration: nil, senderTokens: [],
                consents: [], topics: [], history: [], deletion: receipt)
        }
        return InstallationExport(
            projectID: project.id, fid: fid, installation: installation,
            binding: try await users.binding(project: project, fid: fid),
            registration: try await registrations.find(project: project, tokenOrFID: fid),
            senderTokens: try await subjects.senderTokens(projectID: project.id, fid: fid),
            consents: try await consent.current(installation: installation),
            topics: try await topics.all(project: project, fid: fid),
            history: try await users.history(project: project, fid: fid), deletion: nil)
    }

    /// How many ledger entries or events an export reads at once.
    public static let pageSize = 1000

    /// A page of the installation's consent ledger after `sequence` (0: from the start); empty once read to its end
    /// (and for a deleted installation, whose ledger left with it).
    public func ledger(of export: InstallationExport, after sequence: Int64) async throws -> [ConsentEvent] {
        guard let installation = export.installation else { return [] }
        return try await consent.history(installation: installation, after: sequence, limit: Self.pageSize)
    }

    /// A page of the relayed change-feed events about the installation after `sequence` (0: from the start), in feed
    /// order; shorter than ``pageSize`` at the end.
    public func events(of export: InstallationExport, after sequence: Int64) async throws -> [FeedEvent] {
        try await subjects.events(projectID: export.projectID, fid: export.fid, after: sequence, limit: Self.pageSize)
    }

    /// A page of the events about the installation not yet relayed (sequence 0; the relay moves them within a
    /// second), after the outbox place `id` (0: from the first), each with its place; shorter than ``pageSize`` at the
    /// end.
    public func pendingEvents(of export: InstallationExport, after id: Int64) async throws
        -> [(id: Int64, event: FeedEvent)]
    {
        try await subjects.pendingEvents(projectID: export.projectID, fid: export.fid, after: id, limit: Self.pageSize)
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
