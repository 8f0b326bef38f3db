import Crypto
import Foundation
import JSON
import Registry

/// Every store of ``RegistryStores`` in memory, behind one actor (so a change that spans stores, such as a consent
/// withdrawal disabling registrations or a deletion removing everything of a FID, is atomic as it is in one
/// PostgreSQL transaction). The rules the SQL applies are applied here through the same domain functions
/// (``RefreshOutcome/accepts(incoming:stored:)``, ``TargetFilter/admits(state:refreshedAt:messagingConsent:)``,
/// ``DeletionRecord/state(at:)``), so the domain services can be unit-tested without a database.
public actor InMemoryStores {
    struct Key: Hashable {
        let projectID: String
        let fid: String
    }

    struct SenderKey: Hashable {
        let sender: String
        let scope: String
    }

    struct Delivery {
        var state: DeliveryState
        var attempts = 0
        var lastError: String?
        var acknowledgedAt: Date?
        var nextAttemptAt: Date
        let deliveryID: String
        var rekeyedByProjectAt: Date?
    }

    struct Linked {
        let service: LinkedService
        var secret: LinkedServiceSecret
        var previous: (secret: LinkedServiceSecret, until: Date)?
        var rekeyedByProjectAt: Date?
    }

    struct Deletion {
        let id: Int64
        let projectID: String
        let fid: String
        let fidHash: [UInt8]
        let reason: DeletionReason
        let requestedAt: Date
        let deadline: Date
        var completedAt: Date?
        var deliveries: [String: Delivery]
        var traceparent: String? = nil
    }

    var projects: [String: Project] = [:]
    var serverKeys: [[UInt8]: String] = [:]
    var serverKeyExpiry: [[UInt8]: Date] = [:]
    var serverKeyOrder: [[UInt8]] = []
    var apps: [String: App] = [:]
    var installations: [Key: Installation] = [:]
    var consents: [Key: [String: ConsentState]] = [:]
    var ledger: [Key: [ConsentEvent]] = [:]
    var registrations: [Key: Registration] = [:] {
        // A registration written again may expire (and be reported) again, as `expired_reported` resets in SQL.
        didSet {
            expiredReported.formIntersection(
                registrations.compactMap { $0.value.refreshedAt == oldValue[$0.key]?.refreshedAt ? $0.key : nil })
        }
    }
    var expiredReported: Set<Key> = []
    var topics: [Key: [String: Date]] = [:]
    var retired: Set<[UInt8]> = []
    var services: [String: [String: Linked]] = [:]
    var deletions: [Int64: Deletion] = [:]
    var purged: [(projectID: String, record: DeletionRecord)] = []
    var outbox: [(id: Int64, projectID: String, type: EventType, fid: String, data: JSONValue?, time: Date)] = []
    var feed: [(projectID: String, event: FeedEvent)] = []
    var signingKeys: [StoredSigningKey] = []
    var secrets: [String: [UInt8]] = [:]
    var serviceAccounts: [String: ServiceAccount] = [:]
    var checkins: [UInt64: StoredCheckin] = [:]
    var checkinSeen: [UInt64: Date] = [:]
    var gcmTokens: [String: String] = [:]
    /// Tokens of other senders and scopes, by installation, then by "sender scope".
    var senderTokens: [Key: [SenderKey: (token: String, createdAt: Date)]] = [:]
    /// Send feedback: results per minute by channel and class, and each channel's breaker.
    var feedbackStats: [StatKey: Int] = [:]
    var breakers: [BreakerKey: BreakerState] = [:]
    var jobRuns: [String: RegistryGauges.JobRun] = [:]
    /// People (``UserStore``, ``ErasureStore``) and the audit log (``AuditStore``): InMemoryStores+People.swift.
    var userBindings: [Key: (binding: UserBinding, userHash: [UInt8])] = [:]
    var bindingHistory: [(projectID: String, event: BindingEvent)] = []
    var erasures: [String: StoredErasure] = [:]
    var auditPending: [AuditRecord] = []
    var auditLog: [String: [AuditEntry]] = [:]
    var auditChains: [String: (anchorSeq: Int64, anchorHash: [UInt8], headSeq: Int64, headHash: [UInt8])] = [:]
    /// Imports (``ImportStore``): InMemoryStores+Imports.swift.
    var importedFrom: [Key: String?] = [:]
    var importRuns: [String: ImportRunState] = [:]
    var counters: [String: RegistryGauges.ServiceCounters] = [:]
    var sequence: Int64 = 0
    /// The domain clock, for what the stores stamp themselves (feed times).
    let clock: any WallClock

    public init(clock: any WallClock = SystemClock()) { self.clock = clock }

    /// The bundle for ``RegistryServices/make(stores:clock:freshness:policy:transport:)``.
    public nonisolated var stores: RegistryStores {
        RegistryStores(
            catalog: self, installations: self, consent: self, registrations: self, topics: self, targeting: self,
            deletions: self, deliveries: self, maintenance: self, feed: self, signingKeys: self, secrets: self,
            serviceAccounts: self, checkins: self, feedback: self, users: self, erasures: self, subjects: self,
            audit: self, imports: self, health: self)
    }

    func next() -> Int64 {
        sequence += 1
        return sequence
    }

    func emit(_ type: EventType, _ projectID: String, _ fid: String, _ data: JSONValue? = nil) {
        outbox.append((next(), projectID, type, fid, data, clock.now()))
    }

    func messagingConsent(_ key: Key) -> Bool { consents[key]?[ConsentService.messaging]?.granted ?? false }
}

// MARK: - Installations

extension InMemoryStores: InstallationStore, SecretStore {
    public func create(_ i: Installation, fidHash: [UInt8], initialConsent: Bool) async throws -> Bool {
        let key = Key(projectID: i.projectID, fid: i.fid)
        guard installations[key] == nil, !retired.contains(fidHash) else { return false }
        installations[key] = i
        consents[key] = [
            ConsentService.messaging: ConsentState(
                purpose: ConsentService.messaging, granted: initialConsent, policyVersion: nil, source: "app-default",
                actor: .default, updatedAt: i.createdAt)
        ]
        ledger[key] = [
            ConsentEvent(
                sequence: next(), purpose: ConsentService.messaging, granted: initialConsent, previous: nil,
                actor: .default, source: "app-default", policyVersion: nil, recordedAt: i.createdAt)
        ]
        emit(.installationCreated, i.projectID, i.fid)
        return true
    }

    public func find(projectID: String, fid: String) async throws -> Installation? {
        installations[Key(projectID: projectID, fid: fid)]
    }

    public func touch(projectID: String, fid: String, at: Date, sdkVersion: String?) async throws {
        let key = Key(projectID: projectID, fid: fid)
        guard let i = installations[key], i.lastSeenAt < at || (sdkVersion != nil && sdkVersion != i.sdkVersion)
        else { return }
        installations[key] = Installation(
            projectID: i.projectID, fid: i.fid, appID: i.appID, refreshTokenHash: i.refreshTokenHash,
            sdkVersion: sdkVersion ?? i.sdkVersion, createdAt: i.createdAt, lastSeenAt: max(i.lastSeenAt, at))
    }

    public func delete(_ d: DeletionRequest) async throws -> Bool { deleteInstallation(d) != nil }

    /// The deletion; the record's id, nil when there was no such installation (or it was not idle).
    func deleteInstallation(_ d: DeletionRequest) -> Int64? {
        let key = Key(projectID: d.projectID, fid: d.fid)
        guard let installation = installations[key] else { return nil }
        if let idleBefore = d.idleBefore, installation.lastSeenAt >= idleBefore { return nil }
        installations[key] = nil
        userBindings[key] = nil
        bindingHistory.removeAll { $0.projectID == d.projectID && $0.event.fid == d.fid }
        consents[key] = nil
        ledger[key] = nil
        registrations[key] = nil
        senderTokens[key] = nil
        topics[key] = nil
        retired.insert(d.fidHash)
        let linked = services[d.projectID] ?? [:]
        let id = next()
        deletions[id] = Deletion(
            id: id, projectID: d.projectID, fid: d.fid, fidHash: d.fidHash, reason: d.reason,
            requestedAt: d.requestedAt, deadline: d.deadline, completedAt: linked.isEmpty ? d.requestedAt : nil,
            deliveries: linked.mapValues { _ in
                Delivery(state: .pending, nextAttemptAt: d.requestedAt, deliveryID: UUID().uuidString)
            }, traceparent: d.traceparent)
        emit(.installationDeleted, d.projectID, d.fid, ["reason": .string(d.reason.rawValue)])
        return id
    }

    public func isRetired(projectID: String, fidHash: [UInt8]) async throws -> Bool { retired.contains(fidHash) }

    public func existing(projectID: String, fids: [String]) async throws -> Set<String> {
        Set(fids.filter { installations[Key(projectID: projectID, fid: $0)] != nil })
    }

    public func idle(before cutoff: Date, limit: Int) async throws -> [(projectID: String, fid: String)] {
        installations.values.filter { $0.lastSeenAt < cutoff }.sorted { $0.lastSeenAt < $1.lastSeenAt }.prefix(limit)
            .map { ($0.projectID, $0.fid) }
    }

    public func secret(named name: String) async throws -> [UInt8] {
        if let secret = secrets[name] { return secret }
        let secret = try SecureRandom.bytes(32)
        secrets[name] = secret
        return secret
    }
}

// MARK: - Consent

extension InMemoryStores: ConsentStore {
    public func record(projectID: String, fid: String, change: ConsentChange, at: Date) async throws -> (
        ConsentState, Bool?
    )? {
        let key = Key(projectID: projectID, fid: fid)
        guard installations[key] != nil else { return nil }
        let previous = consents[key]?[change.purpose]?.granted
        if consents[key]?[change.purpose] == nil, (consents[key]?.count ?? 0) >= ConsentService.maxPurposes {
            throw ConsentService.tooManyPurposes
        }
        let state = ConsentState(
            purpose: change.purpose, granted: change.granted, policyVersion: change.policyVersion,
            source: change.source, actor: change.actor, updatedAt: at)
        consents[key, default: [:]][change.purpose] = state
        ledger[key, default: []].append(
            ConsentEvent(
                sequence: next(), purpose: change.purpose, granted: change.granted, previous: previous,
                actor: change.actor, source: change.source, policyVersion: change.policyVersion, recordedAt: at))
        emit(
            .consentChanged, projectID, fid,
            ["purpose": .string(change.purpose), "autoInitEnabled": .bool(change.granted)])
        if change.purpose == ConsentService.messaging, !change.granted, registrations[key]?.state == .active {
            registrations[key]?.state = .disabled
            emit(.registrationDisabled, projectID, fid)
        }
        return (state, previous)
    }

    public func current(projectID: String, fid: String) async throws -> [ConsentState] {
        (consents[Key(projectID: projectID, fid: fid)] ?? [:]).values.sorted { $0.purpose < $1.purpose }
    }

    public func decision(projectID: String, fid: String, purpose: String) async throws -> ConsentState? {
        consents[Key(projectID: projectID, fid: fid)]?[purpose]
    }

    public func history(projectID: String, fid: String, after sequence: Int64, limit: Int) async throws
        -> [ConsentEvent]
    {
        Array((ledger[Key(projectID: projectID, fid: fid)] ?? []).lazy.filter { $0.sequence > sequence }.prefix(limit))
    }
}

// MARK: - Registrations

extension InMemoryStores: RegistrationStore {
    public func register(_ r: Registration) async throws -> RegistrationWrite {
        let key = Key(projectID: r.projectID, fid: r.fid)
        guard installations[key] != nil else { return .installationNotFound }
        guard messagingConsent(key) else { return .consentOff }
        var stored = r
        let existing = registrations[key]
        if let existing {
            stored.token = existing.token
            stored.createdAt = existing.createdAt
        }
        afterWrite(&stored, existing: existing)
        registrations[key] = stored
        emit(existing == nil ? .registrationCreated : .registrationRefreshed, r.projectID, r.fid)
        return .stored(stored, existing == nil ? .created : .refreshed)
    }

    public func refresh(_ r: Registration, audit: AuditCompanion<RegistrationWrite.Kind>?) async throws
        -> RegistrationWrite
    {
        let write = refreshWrite(r)
        if let audit {  // in the same step as the write, as PostgreSQL's statement appends it
            auditPending.append(audit.record(write.kind))
            audit.markAppended(write.kind)
        }
        return write
    }

    private func refreshWrite(_ r: Registration) -> RegistrationWrite {
        let key = Key(projectID: r.projectID, fid: r.fid)
        guard installations[key] != nil else { return .installationNotFound }
        if let clientTime = r.clientTime, clientTime.timeIntervalSince(clock.now()) > RefreshOutcome.maxClientTimeAhead
        {
            return .clientTimeAhead
        }
        guard messagingConsent(key) else { return .consentOff }
        let current = registrations[key]
        if let current, !RefreshOutcome.accepts(incoming: r.clientTime, stored: current.clientTime) {
            return .stored(current, .ignoredAsOlder)
        }
        let holder = registrations.first {
            $0.key != key && $0.key.projectID == r.projectID && $0.value.token == r.token
        }
        if let holder { registrations[holder.key] = nil }
        var stored = r
        if let current, current.token == r.token { stored.createdAt = current.createdAt }
        afterWrite(&stored, existing: current)
        registrations[key] = stored
        let outcome = RefreshOutcome.of(previous: current?.token, incoming: r.token, movedFromAnother: holder != nil)
        emit(
            outcome == .moved ? .registrationMoved : current == nil ? .registrationCreated : .registrationRefreshed,
            r.projectID, r.fid)
        return .stored(stored, outcome)
    }

    public func fids(projectID: String, tokens: [String]) async throws -> [String: String] {
        let wanted = Set(tokens)
        var out: [String: String] = [:]
        for (key, r) in registrations where key.projectID == projectID && wanted.contains(r.token) {
            out[r.token] = key.fid
        }
        return out
    }

    public func find(projectID: String, fid: String) async throws -> Registration? {
        registrations[Key(projectID: projectID, fid: fid)]
    }

    public func find(projectID: String, token: String) async throws -> Registration? {
        registrations.first { $0.key.projectID == projectID && $0.value.token == token }?.value
    }

    public func delete(projectID: String, fid: String) async throws -> Bool {
        let key = Key(projectID: projectID, fid: fid)
        topics[key] = nil
        return registrations.removeValue(forKey: key) != nil
    }

    public func importAPNs(_ items: [APNsImport], initialConsent: Bool, create: Bool) async throws -> [String: String] {
        var tokens: [String: String] = [:]
        for item in items {
            let r = item.registration
            if let existing = registrations.values.filter({
                $0.projectID == r.projectID && $0.apnsToken == item.apnsToken
            }).min(by: { $0.createdAt < $1.createdAt }) {
                tokens[item.apnsToken] = existing.token
                continue
            }
            guard create else { continue }
            guard try await self.create(item.installation, fidHash: item.fidHash, initialConsent: initialConsent) else {
                throw RegistryError(.unavailable, "a generated installation ID was taken; retry")
            }
            registrations[Key(projectID: r.projectID, fid: r.fid)] = r
            emit(.registrationCreated, r.projectID, r.fid)
            tokens[item.apnsToken] = r.token
        }
        return tokens
    }

    public func senderToken(
        projectID: String, fid: String, sender: String, scope: String, candidate: String, at: Date, limit: Int
    ) async throws -> SenderTokenWrite {
        let key = Key(projectID: projectID, fid: fid)
        guard installations[key] != nil else { return .installationNotFound }
        guard messagingConsent(key) else { return .consentOff }
        let pair = SenderKey(sender: sender, scope: scope)
        if let existing = senderTokens[key]?[pair] { return .token(existing.token) }
        guard (senderTokens[key]?.count ?? 0) < limit else { return .full }
        senderTokens[key, default: [:]][pair] = (candidate, at)
        return .token(candidate)
    }

    public func deleteSenderTokens(projectID: String, fid: String, only: (sender: String, scope: String)?)
        async throws -> [String]
    {
        let key = Key(projectID: projectID, fid: fid)
        guard let only else { return senderTokens.removeValue(forKey: key)?.values.map(\.token) ?? [] }
        return senderTokens[key]?.removeValue(forKey: SenderKey(sender: only.sender, scope: only.scope)).map { [$0.token] }
            ?? []
    }
}
