import Crypto
import Foundation
import JSON
import Registry

/// An erasure as kept in memory: its record's head and, per member, the deletion and what the purge copied of it.
struct StoredErasure {
    let projectID: String
    let id: String
    let userHash: [UInt8]
    let requestedAt: Date
    let deadline: Date
    var members: [(deletionID: Int64, fidHash: [UInt8], purged: (ReceiptState, Date?, [DeliveryStatus])?)]
    var scrubbed = false
}

extension InMemoryStores: UserStore, ErasureStore, SubjectStore {
    public func bind(_ r: BindingRequest) async throws -> BindResult? {
        let key = Key(projectID: r.projectID, fid: r.fid)
        guard installations[key] != nil else { return nil }
        let current = userBindings[key]
        if let current, current.binding.userID == r.userID {
            return BindResult(binding: current.binding, change: .unchanged, displaced: [])
        }
        let mine = userBindings.filter { $0.key.projectID == r.projectID && $0.value.binding.userID == r.userID }
        var displaced: [String] = []
        if mine.count >= r.policy.maxInstallationsPerUser {
            guard r.policy.overflow == .unbindLeastRecentlySeen else {
                throw RegistryError(
                    .resourceExhausted,
                    "userId: the user has \(r.policy.maxInstallationsPerUser) installations bound, the most a user may have",
                    field: "userId")
            }
            let victims = mine.keys.sorted {
                let a = installations[$0]?.lastSeenAt ?? .distantPast
                let b = installations[$1]?.lastSeenAt ?? .distantPast
                return a != b ? a < b : $0.fid < $1.fid
            }.prefix(mine.count - r.policy.maxInstallationsPerUser + 1)
            for victim in victims {
                userBindings[victim] = nil
                history(.displaced, victim, userID: r.userID, userHash: r.userHash, previous: nil, at: r.at)
                emit(.userUnbound, r.projectID, victim.fid, ["userId": .string(r.userID), "reason": "displaced"])
                displaced.append(victim.fid)
            }
        }
        let binding = UserBinding(fid: r.fid, userID: r.userID, boundAt: r.at)
        userBindings[key] = (binding, r.userHash)
        history(
            current == nil ? .bound : .moved, key, userID: r.userID, userHash: r.userHash,
            previous: current.map { ($0.binding.userID, $0.userHash) }, at: r.at)
        var payload: [(String, JSONValue)] = [("userId", .string(r.userID))]
        if let current { payload.append(("previousUserId", .string(current.binding.userID))) }
        emit(current == nil ? .userBound : .userMoved, r.projectID, r.fid, .object(payload))
        return BindResult(
            binding: binding, change: current.map { .moved(from: $0.binding.userID) } ?? .bound,
            displaced: displaced.sorted())
    }

    func history(
        _ action: BindingAction, _ key: Key, userID: String, userHash: [UInt8], previous: (String, [UInt8])?, at: Date
    ) {
        bindingHistory.append(
            (
                key.projectID,
                BindingEvent(
                    fid: key.fid, action: action, userID: userID, userHash: userHash, previousUserID: previous?.0,
                    previousUserHash: previous?.1, at: at)
            ))
    }

    public func unbind(projectID: String, fid: String, at: Date) async throws -> UserBinding? {
        let key = Key(projectID: projectID, fid: fid)
        guard let current = userBindings[key] else { return nil }
        userBindings[key] = nil
        history(.unbound, key, userID: current.binding.userID, userHash: current.userHash, previous: nil, at: at)
        emit(.userUnbound, projectID, fid, ["userId": .string(current.binding.userID), "reason": "logout"])
        return current.binding
    }

    public func binding(projectID: String, fid: String) async throws -> UserBinding? {
        userBindings[Key(projectID: projectID, fid: fid)]?.binding
    }

    public func bindings(projectID: String, userID: String) async throws -> [UserBinding] {
        userBindings.filter { $0.key.projectID == projectID && $0.value.binding.userID.utf8.elementsEqual(userID.utf8) }
            .map(\.value.binding).sorted { $0.fid < $1.fid }
    }

    public func bindings(projectID: String, userHash: [UInt8]) async throws -> [UserBinding] {
        userBindings.filter { $0.key.projectID == projectID && $0.value.userHash == userHash }.map(\.value.binding)
            .sorted { $0.fid < $1.fid }
    }

    public func history(projectID: String, fid: String) async throws -> [BindingEvent] {
        bindingHistory.filter { $0.projectID == projectID && $0.event.fid == fid }.map(\.event)
    }

    public func history(projectID: String, userHash: [UInt8]) async throws -> [BindingEvent] {
        bindingHistory.filter {
            $0.projectID == projectID && ($0.event.userHash == userHash || $0.event.previousUserHash == userHash)
        }.map {
            let e = $0.event
            return BindingEvent(
                fid: e.fid, action: e.action, userID: e.userHash == userHash ? e.userID : nil, userHash: e.userHash,
                previousUserID: e.previousUserHash == userHash ? e.previousUserID : nil,
                previousUserHash: e.previousUserHash, at: e.at)
        }
    }

    // MARK: - Erasures

    public func erase(_ r: ErasureRequest) async throws -> ErasureRecord {
        var stored = StoredErasure(
            projectID: r.projectID, id: r.erasureID, userHash: r.userHash, requestedAt: r.requestedAt,
            deadline: r.deadline, members: [])
        let fids = userBindings.filter { $0.key.projectID == r.projectID && $0.value.binding.userID == r.userID }
            .map(\.key.fid).sorted()
        for fid in fids {
            let hash = r.fidHash(fid)
            guard
                let id = deleteInstallation(
                    DeletionRequest(
                        projectID: r.projectID, fid: fid, fidHash: hash, reason: .erasure, requestedAt: r.requestedAt,
                        deadline: r.deadline, idleBefore: nil, traceparent: r.traceparent))
            else { continue }
            stored.members.append((id, hash, nil))
        }
        bindingHistory = bindingHistory.map { item in
            let e = item.event
            guard item.projectID == r.projectID, e.userHash == r.userHash || e.previousUserHash == r.userHash else {
                return item
            }
            return (
                item.projectID,
                BindingEvent(
                    fid: e.fid, action: e.action, userID: e.userHash == r.userHash ? nil : e.userID,
                    userHash: e.userHash, previousUserID: e.previousUserHash == r.userHash ? nil : e.previousUserID,
                    previousUserHash: e.previousUserHash, at: e.at)
            )
        }
        let userTypes: Set<EventType> = [.userBound, .userMoved, .userUnbound]
        func names(_ type: EventType, _ data: JSONValue?) -> Bool {
            userTypes.contains(type)
                && (data?["userId"]?.stringValue == r.userID || data?["previousUserId"]?.stringValue == r.userID)
        }
        feed.removeAll { $0.projectID == r.projectID && names($0.event.type, $0.event.data) }
        outbox.removeAll { $0.projectID == r.projectID && names($0.type, $0.data) }
        erasures[r.erasureID] = stored
        return record(stored)
    }

    func record(_ e: StoredErasure) -> ErasureRecord {
        ErasureRecord(
            id: e.id, userHash: e.userHash, requestedAt: e.requestedAt, deadline: e.deadline,
            members: e.members.map { m in
                let live = deletions[m.deletionID].map(record)
                    ?? purged.first { $0.record.id == m.deletionID }?.record
                return ErasureMember(
                    deletionID: m.deletionID, fidHash: m.fidHash, deletion: live, purgedState: m.purged?.0,
                    completedAt: m.purged?.1, purgedServices: m.purged?.2 ?? [])
            }.sorted { $0.fidHash.lexicographicallyPrecedes($1.fidHash) })
    }

    public func erasure(projectID: String, id: String) async throws -> ErasureRecord? {
        erasures[id].flatMap { $0.projectID == projectID ? record($0) : nil }
    }

    public func erasures(projectID: String, userHash: [UInt8]) async throws -> [ErasureRecord] {
        erasures.values.filter { $0.projectID == projectID && $0.userHash == userHash }
            .sorted { ($0.requestedAt, $0.id) < ($1.requestedAt, $1.id) }.map(record)
    }

    /// The purge's part for people and the audit log (``purge(at:completedBefore:limit:)``), before the
    /// deletion `id` leaves: its outcome copied to its erasure, and the log's clear mentions of its FID cleared.
    func purging(_ deletion: Deletion, at now: Date) {
        let record = record(deletion)
        for (id, var erasure) in erasures where erasure.projectID == deletion.projectID {
            guard let index = erasure.members.firstIndex(where: { $0.deletionID == deletion.id }) else { continue }
            erasure.members[index].purged = (
                record.state(at: now) == .done ? .done : .overdue, deletion.completedAt, record.services
            )
            erasures[id] = erasure
        }
        scrubAudit(projectID: deletion.projectID, digest: deletion.fidHash)
    }

    /// After the purge: an erasure none of whose deletions is kept any more leaves the audit log's clear text too.
    func scrubErasedUsers() {
        for (id, erasure) in erasures where !erasure.scrubbed {
            guard erasure.members.allSatisfy({ deletions[$0.deletionID] == nil }) else { continue }
            scrubAudit(projectID: erasure.projectID, digest: erasure.userHash)
            erasures[id]?.scrubbed = true
        }
    }

    func scrubAudit(projectID: String, digest: [UInt8]) {
        auditLog[projectID] = auditLog[projectID]?.map { e in
            guard e.subject, e.targetDigest == digest, e.target != nil else { return e }
            return AuditEntry(
                projectID: e.projectID, seq: e.seq, at: e.at, atMicros: e.atMicros, action: e.action, target: nil,
                targetDigest: e.targetDigest, subject: e.subject, actor: e.actor, requestID: e.requestID,
                outcome: e.outcome, previousHash: e.previousHash, hash: e.hash)
        }
    }

    // MARK: - Subject reads

    public func senderTokens(projectID: String, fid: String) async throws -> [SenderTokenRecord] {
        (senderTokens[Key(projectID: projectID, fid: fid)] ?? [:]).map {
            SenderTokenRecord(
                sender: $0.key.sender, scope: $0.key.scope, token: $0.value.token, createdAt: $0.value.createdAt,
                refreshedAt: $0.value.createdAt)
        }.sorted { ($0.sender, $0.scope) < ($1.sender, $1.scope) }
    }

    public func events(projectID: String, fid: String, after sequence: Int64, limit: Int) async throws -> [FeedEvent] {
        Array(
            feed.lazy.filter { $0.projectID == projectID && $0.event.fid == fid && $0.event.sequence > sequence }
                .map(\.event).prefix(limit))
    }

    public func pendingEvents(projectID: String, fid: String, after id: Int64, limit: Int) async throws
        -> [(id: Int64, event: FeedEvent)]
    {
        Array(
            outbox.lazy.filter { $0.projectID == projectID && $0.fid == fid && $0.id > id }.prefix(limit).map {
                ($0.id, FeedEvent(sequence: 0, type: $0.type, fid: $0.fid, data: $0.data, time: $0.time))
            })
    }
}

extension InMemoryStores: AuditStore {
    public func append(_ record: AuditRecord) async throws { auditPending.append(record) }

    public func chain(limit: Int, share: Int) async throws -> [AuditHead] {
        let batch = auditPending.prefix(limit)
        auditPending.removeFirst(batch.count)
        var moved: [String: AuditHead] = [:]
        for r in batch {
            var chain = auditChains[r.projectID] ?? (0, AuditChain.genesis, 0, AuditChain.genesis)
            // As on PostgreSQL: an entry about a subject already purged keeps its keyed hash only.
            let purgedSubject =
                r.subject
                && (erasures.values.contains { $0.projectID == r.projectID && $0.userHash == r.targetDigest && $0.scrubbed }
                    || (retired.contains(r.targetDigest)
                        && !deletions.values.contains { $0.projectID == r.projectID && $0.fidHash == r.targetDigest }))
            let target: String? = purgedSubject ? nil : r.target
            let unhashed = AuditEntry(
                projectID: r.projectID, seq: chain.headSeq + 1, at: r.at, atMicros: AuditChain.micros(r.at),
                action: r.action, target: target, targetDigest: r.targetDigest, subject: r.subject, actor: r.actor,
                requestID: r.requestID, outcome: r.outcome, previousHash: chain.headHash, hash: [])
            let hash = AuditChain.hash(previous: chain.headHash, unhashed)
            auditLog[r.projectID, default: []].append(
                AuditEntry(
                    projectID: r.projectID, seq: unhashed.seq, at: r.at, atMicros: unhashed.atMicros, action: r.action,
                    target: target, targetDigest: r.targetDigest, subject: r.subject, actor: r.actor,
                    requestID: r.requestID, outcome: r.outcome, previousHash: chain.headHash, hash: hash))
            chain.headSeq = unhashed.seq
            chain.headHash = hash
            auditChains[r.projectID] = chain
            moved[r.projectID] = AuditHead(
                projectID: r.projectID, seq: chain.headSeq, hash: hash, chained: (moved[r.projectID]?.chained ?? 0) + 1)
        }
        return moved.values.sorted { $0.projectID < $1.projectID }
    }

    public func chainState(projectID: String) async throws -> AuditChainState? {
        let pending = auditPending.filter { $0.projectID == projectID }.count
        guard let chain = auditChains[projectID] else {
            guard pending > 0 else { return nil }
            return AuditChainState(
                anchorSeq: 0, anchorHash: AuditChain.genesis, headSeq: 0, headHash: AuditChain.genesis, pending: pending)
        }
        return AuditChainState(
            anchorSeq: chain.anchorSeq, anchorHash: chain.anchorHash, headSeq: chain.headSeq, headHash: chain.headHash,
            pending: pending)
    }

    public func entries(projectID: String, afterSeq: Int64, limit: Int) async throws -> [AuditEntry] {
        Array((auditLog[projectID] ?? []).filter { $0.seq > afterSeq }.prefix(limit))
    }

    public func purge(before: Date, at: Date, limit: Int) async throws -> Int {
        var dropped = 0
        for project in auditChains.keys.sorted() where dropped < limit {
            let entries = auditLog[project] ?? []
            let prefix = entries.prefix { $0.at < before }.prefix(limit - dropped)
            guard let last = prefix.last else { continue }
            auditLog[project] = Array(entries.dropFirst(prefix.count))
            auditChains[project]?.anchorSeq = last.seq
            auditChains[project]?.anchorHash = last.hash
            auditPending.append(AuditService.purgeRecord(projectID: project, anchorSeq: last.seq, at: at))
            dropped += prefix.count
        }
        return dropped
    }

    public func chainedProjects() async throws -> [String] {
        Set(auditChains.keys).union(auditPending.map(\.projectID)).sorted()
    }
}
