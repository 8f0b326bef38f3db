import Crypto
import Foundation
import JSON

/// An import row made ready for the store: the installation, its registration and what belongs to it, keyed.
public struct PlannedImport: Sendable {
    public var line: Int
    public var installation: Installation
    public var fidHash: [UInt8]
    public var importedFrom: String?
    /// Nil only for a line of the registry's own export of an installation that had none.
    public var registration: Registration?
    /// Messaging consent the source had; nil: the app's default (for an installation the import makes).
    public var messagingConsent: Bool?
    public var consentTime: Date
    /// The registry's own export: every purpose's state and the whole ledger, as they were.
    public var consents: [ConsentState]
    public var ledger: [ConsentEvent]
    public var topics: [TopicSubscription]
    public var userID: String?
    public var userHash: [UInt8]?
    public var boundAt: Date
    public var senderTokens: [SenderTokenRecord]
}

/// What a batch did (or, dry, would do).
public struct ImportCounts: Sendable, Equatable {
    public var installationsCreated = 0
    public var installationsUpdated = 0
    public var registrationsWritten = 0
    public var consentChanges = 0
    public var topicsAdded = 0
    public var usersBound = 0
    /// Rows of installations deleted before: never brought back.
    public var deletedSkipped = 0
    /// Rows whose token another installation holds with a newer refresh (the newer wins).
    public var olderThanStored = 0

    public init() {}

    public static func + (a: ImportCounts, b: ImportCounts) -> ImportCounts {
        var c = a
        c.installationsCreated += b.installationsCreated
        c.installationsUpdated += b.installationsUpdated
        c.registrationsWritten += b.registrationsWritten
        c.consentChanges += b.consentChanges
        c.topicsAdded += b.topicsAdded
        c.usersBound += b.usersBound
        c.deletedSkipped += b.deletedSkipped
        c.olderThanStored += b.olderThanStored
        return c
    }
}

/// Where a run stands: rows of the source done (each committed batch moves it), and whether it finished.
public struct ImportRunState: Sendable, Equatable {
    public let rowsDone: Int
    public let finished: Bool

    public init(rowsDone: Int, finished: Bool) {
        self.rowsDone = rowsDone
        self.finished = finished
    }
}

/// Storage of imports and project exports.
public protocol ImportStore: Sendable {
    /// Merges a batch in one transaction by the refresh rules (the newer wins; a deleted FID never comes back), set
    /// by set, and records that the run `key` is done through source row `rowsThrough`; dry: rolled back.
    func merge(
        _ batch: [PlannedImport], projectID: String, format: ImportFormat, run key: String?, rowsThrough: Int,
        dryRun: Bool
    ) async throws -> ImportCounts
    func run(projectID: String, key: String) async throws -> ImportRunState?
    func finish(projectID: String, key: String, rows: Int) async throws
    /// A page of the project's installations with everything they hold, in FID order after `after`; of each
    /// installation's consent ledger, which has no bound, at most its first `ledgerLimit` entries (the rest are read
    /// with ``exportLedger(projectID:fid:after:limit:)``).
    func exportPage(projectID: String, after: String, limit: Int, ledgerLimit: Int) async throws
        -> [ExportedInstallation]
    /// A page of an installation's consent ledger: the entries after `sequence`, oldest first.
    func exportLedger(projectID: String, fid: String, after sequence: Int64, limit: Int) async throws -> [ConsentEvent]
}

/// Progress of an import, as it goes.
public struct ImportProgress: Sendable {
    public var rows = 0
    public var imported = 0
    public var rejected = 0
    public var skipped = 0
    public var bytes = 0
    public var counts = ImportCounts()
}

/// Imports from the services teams leave, and the project's own export.
public struct ImportService: Sendable {
    let store: any ImportStore
    let hasher: FIDHasher
    let users: UserService
    public let clock: any WallClock
    public let freshness: Freshness

    public init(
        store: any ImportStore, hasher: FIDHasher, users: UserService, clock: any WallClock, freshness: Freshness
    ) {
        self.store = store
        self.hasher = hasher
        self.users = users
        self.clock = clock
        self.freshness = freshness
    }

    public static let batchSize = 5000

    /// The record ready for the store: its installation (the source's FID, or one derived from what the source knew
    /// the device by), its app (the record's, or the project's app of its platform), its registration.
    public func plan(_ r: ImportRecord, project: Project, apps: [App], format: ImportFormat) -> Result<
        PlannedImport, ImportRejection
    > {
        let r = format == .registry ? r : r.droppingUnfitFacts()
        if let reason = r.refusal() { return .failure(ImportRejection(line: r.line, reason: reason)) }
        let now = clock.now()
        let app: App?
        if let id = r.appID { app = apps.first { $0.id == id } } else { app = apps.first { $0.platform == r.platform } }
        guard let app else {
            return .failure(
                ImportRejection(
                    line: r.line,
                    reason: r.appID.map { "appId: no app \($0.prefix(64)) in the project" }
                        ?? "the project has no \(r.platform.rawValue) app (token-registry app create)"))
        }
        let derived = r.fid == nil
        let fid = r.fid ?? hasher.derivedFID(projectID: project.id, seed: r.sourceKey)
        let created = r.createdAt ?? r.lastSeenAt ?? now
        let seen = max(r.lastSeenAt ?? created, created)
        let token = r.token ?? hasher.derivedToken(fid: fid, projectID: project.id, seed: r.sourceKey)
        var registration =
            format == .registry
            ? r.registration
            : Registration(
                projectID: project.id, fid: fid, token: token, platform: r.platform, apnsToken: r.apnsToken,
                apnsEnvironment: r.apnsEnvironment, bundleID: r.bundleID ?? (r.platform == .ios ? app.bundleID : nil),
                appVersion: r.appVersion, web: r.web, createdAt: created, refreshedAt: r.refreshedAt ?? seen)
        registration?.projectID = project.id
        registration?.fid = fid
        var userHash: [UInt8]?
        if let user = r.userID { userHash = users.userHash(projectID: project.id, userID: user) }
        return .success(
            PlannedImport(
                line: r.line,
                installation: Installation(
                    projectID: project.id, fid: fid, appID: app.id, refreshTokenHash: [], sdkVersion: r.sdkVersion,
                    createdAt: created, lastSeenAt: seen),
                fidHash: hasher.hash(projectID: project.id, fid: fid),
                importedFrom: format == .registry ? r.importedFrom : (derived ? format.rawValue : nil),
                registration: registration, messagingConsent: r.messagingConsent,
                consentTime: r.consentTime ?? seen, consents: r.consents, ledger: r.ledger, topics: r.topics,
                userID: r.userID, userHash: userHash, boundAt: r.boundAt ?? seen, senderTokens: r.senderTokens))
    }

    /// Runs an import: rows read and planned, batches of ``batchSize`` merged, each commit recording how far the run
    /// got, so a run killed midway starts again after its last committed batch (`key` names the run: the source's
    /// hash). Rejections go to `rejected` and never stop it.
    public func run(
        project: Project, apps: [App], format: ImportFormat, reader: inout some ImportReader, key: String?,
        dryRun: Bool, batchSize: Int = ImportService.batchSize, bytes: @escaping () -> Int,
        progress: (ImportProgress) -> Void, rejected: (ImportRejection) -> Void
    ) async throws -> ImportProgress {
        var state = ImportProgress()
        var resumeAt = 0
        if let key, !dryRun, let run = try await store.run(projectID: project.id, key: key), !run.finished {
            resumeAt = run.rowsDone
        }
        var batch: [PlannedImport] = []
        var planned = Set<String>()
        // One batch merges while the next is read: the source's parsing and the database's work overlap, and batches
        // still commit one after another, in order (what resuming counts on).
        var merging: Task<ImportCounts, any Error>?
        let store = store
        func settle() async throws {
            guard let running = merging else { return }
            merging = nil
            state.counts = state.counts + (try await running.value)
            state.bytes = bytes()
            progress(state)
        }
        /// Hands the batch to the store; `through` is the last source row it covers (what a resumed run skips).
        func flush(through: Int) async throws {
            guard !batch.isEmpty else { return }
            try await settle()
            let items = batch
            merging = Task {
                try await store.merge(
                    items, projectID: project.id, format: format, run: dryRun ? nil : key, rowsThrough: through,
                    dryRun: dryRun)
            }
            state.imported += batch.count
            batch.removeAll(keepingCapacity: true)
            planned.removeAll(keepingCapacity: true)
        }
        do {
            while let row = try reader.next() {
                state.rows += 1
                if state.rows <= resumeAt { continue }
                switch row {
                case .skipped: state.skipped += 1
                case let .rejected(rejection):
                    state.rejected += 1
                    rejected(rejection)
                case let .record(record):
                    switch plan(record, project: project, apps: apps, format: format) {
                    case let .failure(rejection):
                        state.rejected += 1
                        rejected(rejection)
                    case let .success(item):
                        // One row an installation and a token a batch: a later row for either goes in the next
                        // batch, where the newer-wins rule orders them.
                        let token = item.registration?.token ?? ""
                        if planned.contains(item.installation.fid) || planned.contains(token) {
                            try await flush(through: state.rows - 1)
                        }
                        planned.insert(item.installation.fid)
                        if !token.isEmpty { planned.insert(token) }
                        batch.append(item)
                        if batch.count >= batchSize { try await flush(through: state.rows) }
                    }
                }
            }
            try await flush(through: state.rows)
            try await settle()
        } catch {
            // What is merging finishes (or fails) before the error is told: no commit lands after it.
            _ = try? await merging?.value
            throw error
        }
        if let key, !dryRun { try await store.finish(projectID: project.id, key: key, rows: state.rows) }
        state.bytes = bytes()
        return state
    }

    /// Entries of an installation's consent ledger read with its page of installations; a longer ledger is read and
    /// written a page of ``ledgerPage`` at a time, so one installation that re-sent its consent a million times is
    /// never a million entries held at once (docs/security.md, class 17).
    public static let ledgerInline = 32
    public static let ledgerPage = 1000

    /// The project's export, page by page: `write` gets the bytes of each installation's line, its newline included
    /// (a line with a long ledger in several writes).
    public func export(project: Project, pageSize: Int = 1000, _ write: ([UInt8]) async throws -> Void)
        async throws
    {
        var after = ""
        while true {
            let page = try await store.exportPage(
                projectID: project.id, after: after, limit: pageSize, ledgerLimit: Self.ledgerInline + 1)
            let now = clock.now()
            for item in page {
                if item.ledger.count <= Self.ledgerInline {
                    try await write(RegistryExportFormat.line(item, freshness: freshness, at: now).encoded() + [10])
                } else {
                    try await writeWithPagedLedger(item, projectID: project.id, at: now, write)
                }
            }
            // A page may end early, at what its installations' topics and tokens weigh: only an empty one ends.
            guard let last = page.last else { return }
            after = last.installation.fid
        }
    }

    /// The line of an installation whose ledger is longer than ``ledgerInline``: its other members, then
    /// `consentLedger` written a page at a time.
    private func writeWithPagedLedger(
        _ item: ExportedInstallation, projectID: String, at now: Date, _ write: ([UInt8]) async throws -> Void
    ) async throws {
        var head = RegistryExportFormat.line(item, freshness: freshness, at: now, ledger: false).encoded()
        head.removeLast()  // the closing brace: the ledger follows
        try await write(head + Array(#","consentLedger":["#.utf8))
        var ledger = PagedArrayWriter(pageSize: Self.ledgerPage)
        let fid = item.installation.fid
        try await ledger.pages(
            { try await store.exportLedger(projectID: projectID, fid: fid, after: $0, limit: Self.ledgerPage) },
            place: { (entry: ConsentEvent) in entry.sequence }, json: RegistryExportFormat.ledgerEntry, to: write)
        try await write(Array("]}\n".utf8))
    }
}
