import Foundation
import Registry

// MARK: - Linked services and deletion records

extension InMemoryStores: DeletionStore {
    public func addLinkedService(projectID: String, service: LinkedService, secret: String, limit: Int) async throws
        -> Bool
    {
        guard services[projectID]?[service.name] == nil else { return false }
        guard (services[projectID]?.count ?? 0) < limit else {
            throw RegistryError(
                .resourceExhausted, "a project may have at most \(limit) linked services", field: "name")
        }
        services[projectID, default: [:]][service.name] = Linked(
            service: service, secret: LinkedServiceSecret(secret, holder: .project))
        return true
    }

    public func linkedServices(projectID: String) async throws -> [LinkedService] {
        (services[projectID] ?? [:]).values.map(\.service).sorted { $0.name < $1.name }
    }

    public func removeLinkedService(projectID: String, name: String, at: Date) async throws -> Bool {
        guard services[projectID]?.removeValue(forKey: name) != nil else { return false }
        counters[projectID + "\u{0}" + name] = nil
        for (id, deletion) in deletions where deletion.projectID == projectID {
            if let delivery = deletion.deliveries[name], !delivery.state.isFinal {
                deletions[id]?.deliveries[name]?.state = .abandoned
                completeIfDone(id, at: at)
            }
        }
        return true
    }

    public func linkedServiceSecrets(projectID: String, name: String, at: Date) async throws -> LinkedServiceKeys? {
        guard let linked = services[projectID]?[name] else { return nil }
        let previous = linked.previous.flatMap { $0.until > at ? $0.secret : nil }
        return LinkedServiceKeys(
            secrets: [linked.secret] + [previous].compactMap { $0 }, rekeyedByProjectAt: linked.rekeyedByProjectAt)
    }

    public func rotateSecret(
        projectID: String, name: String, secret: String, holder: SecretHolder, previousUntil: Date, at: Date
    ) async throws -> Bool {
        guard var linked = services[projectID]?[name] else { return false }
        linked.previous = (linked.secret, previousUntil)
        linked.secret = LinkedServiceSecret(secret, holder: holder)
        if holder == .project { linked.rekeyedByProjectAt = at }
        services[projectID]?[name] = linked
        return true
    }

    func completeIfDone(_ id: Int64, at: Date) {
        guard let deletion = deletions[id], deletion.completedAt == nil,
            deletion.deliveries.values.allSatisfy({ $0.state.isFinal })
        else { return }
        deletions[id]?.completedAt = at
    }

    func record(_ deletion: Deletion) -> DeletionRecord {
        DeletionRecord(
            id: deletion.id, fid: deletion.fid, fidHash: deletion.fidHash, reason: deletion.reason,
            requestedAt: deletion.requestedAt, deadline: deletion.deadline, completedAt: deletion.completedAt,
            purged: false,
            services: deletion.deliveries.sorted { $0.key < $1.key }.map {
                DeliveryStatus(
                    service: $0.key, state: $0.value.state, attempts: $0.value.attempts, lastError: $0.value.lastError,
                    acknowledgedAt: $0.value.acknowledgedAt,
                    rekeyedByProjectAt: $0.value.acknowledgedAt == nil
                        ? services[deletion.projectID]?[$0.key]?.rekeyedByProjectAt : $0.value.rekeyedByProjectAt)
            })
    }

    public func deletion(projectID: String, fid: String, fidHash: [UInt8]) async throws -> DeletionRecord? {
        if let live = deletions.values.first(where: { $0.projectID == projectID && $0.fid == fid }) {
            return record(live)
        }
        return purged.first { $0.projectID == projectID && $0.record.fidHash == fidHash }?.record
    }

    public func deletions(projectID: String, state: ReceiptState, at now: Date, afterID: Int64, limit: Int)
        async throws -> [DeletionRecord]
    {
        let live = deletions.values.filter { $0.projectID == projectID && $0.id > afterID }.map(record)
        let gone = purged.filter { $0.projectID == projectID && $0.record.id > afterID }.map(\.record)
        return Array((live + gone).filter { $0.state(at: now) == state }.sorted { $0.id < $1.id }.prefix(limit))
    }

    public func acknowledge(projectID: String, fid: String, service: String, deliveryID: String, at: Date)
        async throws -> AcknowledgeOutcome
    {
        guard let deletion = deletions.values.first(where: { $0.projectID == projectID && $0.fid == fid }),
            let delivery = deletion.deliveries[service], delivery.deliveryID == deliveryID
        else { return .notFound }
        switch delivery.state {
        case .pending, .accepted: break
        case .acknowledged: return .alreadyAcknowledged
        case let state: return .closed(state)
        }
        acknowledgeDelivery(deletion.id, service: service, at: at)
        return .acknowledged
    }

    func acknowledgeDelivery(_ id: Int64, service: String, at: Date) {
        guard let deletion = deletions[id] else { return }
        deletions[id]?.deliveries[service]?.state = .acknowledged
        deletions[id]?.deliveries[service]?.acknowledgedAt = at
        deletions[id]?.deliveries[service]?.lastError = nil
        deletions[id]?.deliveries[service]?.rekeyedByProjectAt =
            services[deletion.projectID]?[service]?.rekeyedByProjectAt
        completeIfDone(id, at: at)
    }
}

// MARK: - Deliveries, maintenance, the feed

extension InMemoryStores: DeliveryStore, MaintenanceStore, ChangeFeedStore {
    public func claimDue(at now: Date, leaseUntil: Date, limit: Int, perProject: Int, excluding: Set<String>)
        async throws -> [ClaimedDelivery]
    {
        // As on PostgreSQL: each project's most overdue, at most `perProject`, then the most overdue of those.
        var due: [(projectID: String, id: Int64, name: String, at: Date)] = []
        for (id, deletion) in deletions where !excluding.contains(deletion.projectID) {
            for (name, delivery) in deletion.deliveries where delivery.state == .pending && delivery.nextAttemptAt <= now {
                due.append((deletion.projectID, id, name, delivery.nextAttemptAt))
            }
        }
        let byProject = Dictionary(grouping: due, by: \.projectID).values.flatMap {
            $0.sorted { ($0.at, $0.id, $0.name) < ($1.at, $1.id, $1.name) }.prefix(perProject)
        }
        var claimed: [ClaimedDelivery] = []
        for pick in byProject.sorted(by: { ($0.at, $0.id, $0.name) < ($1.at, $1.id, $1.name) }).prefix(limit) {
            guard let deletion = deletions[pick.id], let delivery = deletion.deliveries[pick.name],
                services[deletion.projectID]?[pick.name] != nil
            else { continue }
            deletions[pick.id]?.deliveries[pick.name]?.attempts += 1
            deletions[pick.id]?.deliveries[pick.name]?.nextAttemptAt = leaseUntil
            let keys = try await linkedServiceSecrets(projectID: deletion.projectID, name: pick.name, at: now)
            claimed.append(
                ClaimedDelivery(
                    deletionID: pick.id, service: pick.name, deliveryID: delivery.deliveryID,
                    attempts: delivery.attempts + 1, endpoint: services[deletion.projectID]![pick.name]!.service.endpoint,
                    secrets: keys?.secrets.map(\.secret) ?? [], projectID: deletion.projectID, fid: deletion.fid,
                    reason: deletion.reason, requestedAt: deletion.requestedAt, deadline: deletion.deadline,
                    traceparent: deletion.traceparent))
        }
        return claimed
    }

    public func record(_ item: ClaimedDelivery, outcome: DeliveryOutcome, at now: Date) async throws {
        let key = item.projectID + "\u{0}" + item.service
        let old = counters[key]
        var failed = 0
        switch outcome {
        case .accepted:
            if deletions[item.deletionID]?.deliveries[item.service]?.state == .pending {
                deletions[item.deletionID]?.deliveries[item.service]?.state = .accepted
            }
        case .acknowledged:
            if let state = deletions[item.deletionID]?.deliveries[item.service]?.state, !state.isFinal {
                acknowledgeDelivery(item.deletionID, service: item.service, at: now)
            }
        case let .failed(reason, retryAt):
            failed = 1
            if deletions[item.deletionID]?.deliveries[item.service]?.state == .pending {
                deletions[item.deletionID]?.deliveries[item.service]?.lastError = reason
                deletions[item.deletionID]?.deliveries[item.service]?.nextAttemptAt = retryAt
            }
        }
        guard services[item.projectID]?[item.service] != nil else { return }  // removed meanwhile: no counters
        counters[key] = RegistryGauges.ServiceCounters(
            projectID: item.projectID, service: item.service, attempts: (old?.attempts ?? 0) + 1,
            failures: (old?.failures ?? 0) + failed)
    }

    public func purge(at now: Date, completedBefore: Date, limit: Int) async throws -> Int {
        var count = 0
        for (id, deletion) in deletions.sorted(by: { $0.key < $1.key }) where count < limit {
            let due = deletion.deadline <= now
            let audited = deletion.completedAt.map { $0 <= completedBefore } ?? false
            guard due || audited else { continue }
            let unconfirmed = deletion.deliveries.filter { !$0.value.state.isFinal }.keys.sorted()
            if due && !unconfirmed.isEmpty {
                purged.append(
                    (
                        deletion.projectID,
                        DeletionRecord(
                            id: id, fid: nil, fidHash: deletion.fidHash, reason: deletion.reason,
                            requestedAt: deletion.requestedAt, deadline: deletion.deadline, completedAt: nil,
                            purged: true,
                            services: unconfirmed.map {
                                DeliveryStatus(
                                    service: $0, state: .unacknowledged, attempts: 0, lastError: nil,
                                    acknowledgedAt: nil)
                            })
                    ))
            }
            purging(deletion, at: now)
            deletions[id] = nil
            feed.removeAll { $0.projectID == deletion.projectID && $0.event.fid == deletion.fid }
            outbox.removeAll { $0.projectID == deletion.projectID && $0.fid == deletion.fid }
            count += 1
        }
        return count
    }

    public func finishPurge(at now: Date, eventsBefore: Date) async throws {
        // As on PostgreSQL: the events before the first one at or after `eventsBefore`, in feed order.
        feed.removeSubrange(..<(feed.firstIndex { $0.event.time >= eventsBefore } ?? feed.endIndex))
        scrubErasedUsers()
    }

    public func reportExpiredRegistrations(before cutoff: Date, limit: Int) async throws -> Int {
        var count = 0
        for (key, r) in registrations where r.refreshedAt < cutoff && count < limit && !expiredReported.contains(key) {
            expiredReported.insert(key)
            emit(.registrationExpired, key.projectID, key.fid)
            count += 1
        }
        return count
    }

    public func recordRun(job: String, at: Date, durationSeconds: Double, processed: Int) async throws {
        jobRuns[job] = RegistryGauges.JobRun(job: job, lastRun: at, durationSeconds: durationSeconds)
    }

    public func databaseNow() async throws -> Date { clock.now() }

    public func registrationCounts(staleBefore: Date, expiredBefore: Date) async throws -> [String: Int] {
        var counts = ["fresh": 0, "stale": 0, "expired": 0, "disabled": 0, "retired": 0]
        for r in registrations.values {
            switch r.state {
            case .disabled: counts["disabled", default: 0] += 1
            case .retired: counts["retired", default: 0] += 1
            case .active:
                let name = r.refreshedAt >= staleBefore ? "fresh" : r.refreshedAt >= expiredBefore ? "stale" : "expired"
                counts[name, default: 0] += 1
            }
        }
        return counts
    }

    public func gauges(at now: Date) async throws -> RegistryGauges {
        let records = deletions.values.map(record)
        var counts: [ReceiptState: Int] = [:]
        for record in records { counts[record.state(at: now), default: 0] += 1 }
        counts[.overdue, default: 0] += purged.count
        let oldest = records.filter { $0.completedAt == nil }.map(\.requestedAt).min()
        var gauges = RegistryGauges(
            deletions: counts, oldestUndeliveredSeconds: oldest.map { now.timeIntervalSince($0) } ?? 0,
            services: counters.values.sorted { ($0.projectID, $0.service) < ($1.projectID, $1.service) },
            jobs: jobRuns.values.sorted { $0.job < $1.job })
        gauges.outboxRows = outbox.count
        gauges.outboxOldestSeconds = outbox.map(\.time).min().map { max(0, now.timeIntervalSince($0)) } ?? 0
        gauges.signingKeyAgeSeconds = signingKeys.filter { $0.retiredAt == nil }.map(\.createdAt).max().map {
            now.timeIntervalSince($0)
        }
        gauges.trippedBreakers = breakers.filter(\.value.tripped).map {
            RegistryGauges.TrippedBreaker(projectID: $0.key.projectID, channel: $0.key.channel.rawValue)
        }.sorted { ($0.projectID, $0.channel) < ($1.projectID, $1.channel) }
        return gauges
    }

    public func events(projectID: String, after cursor: Int64, limit: Int) async throws -> [FeedEvent] {
        Array(feed.filter { $0.projectID == projectID && $0.event.sequence > cursor }.map(\.event).prefix(limit))
    }

    public func relay(limit: Int) async throws -> Int {
        // One actor: every appended event belongs to a finished change, so all of them are safe to number.
        let moved = outbox.prefix(limit)
        outbox.removeFirst(moved.count)
        for e in moved {
            feed.append(
                (e.projectID, FeedEvent(sequence: next(), type: e.type, fid: e.fid, data: e.data, time: e.time)))
        }
        return moved.count
    }
}
