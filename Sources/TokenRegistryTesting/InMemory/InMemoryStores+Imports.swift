import Crypto
import Foundation
import Registry

/// ``ImportStore`` in memory: the same rules as `PostgresImportStore`, row by row (a batch is one actor turn, so it
/// is as atomic as the transaction there).
extension InMemoryStores: ImportStore {
    public func merge(
        _ batch: [PlannedImport], projectID: String, format: ImportFormat, run key: String?, rowsThrough: Int,
        dryRun: Bool
    ) async throws -> ImportCounts {
        let saved = (installations, consents, ledger, registrations, topics, userBindings, bindingHistory, senderTokens,
            importedFrom, importRuns)
        var counts = ImportCounts()
        for item in batch {
            let key = Key(projectID: projectID, fid: item.installation.fid)
            if retired.contains(item.fidHash) {
                counts.deletedSkipped += 1
                continue
            }
            let made = installations[key] == nil
            if made {
                installations[key] = Installation(
                    projectID: projectID, fid: item.installation.fid, appID: item.installation.appID,
                    refreshTokenHash: SHA256.hash(try SecureRandom.bytes(32)), sdkVersion: item.installation.sdkVersion,
                    createdAt: item.installation.createdAt, lastSeenAt: item.installation.lastSeenAt)
                importedFrom[key] = item.importedFrom
                counts.installationsCreated += 1
                if !item.consents.isEmpty {
                    consents[key] = Dictionary(uniqueKeysWithValues: item.consents.map { ($0.purpose, $0) })
                    ledger[key] = item.ledger.map {
                        ConsentEvent(
                            sequence: next(), purpose: $0.purpose, granted: $0.granted, previous: $0.previous,
                            actor: $0.actor, source: $0.source, policyVersion: $0.policyVersion, recordedAt: $0.recordedAt)
                    }
                } else {
                    let granted = item.messagingConsent ?? apps[item.installation.appID]?.autoInitDefault ?? true
                    consents[key] = [
                        ConsentService.messaging: ConsentState(
                            purpose: ConsentService.messaging, granted: granted, policyVersion: nil,
                            source: format.consentSource, actor: .server, updatedAt: item.consentTime)
                    ]
                    ledger[key] = [
                        ConsentEvent(
                            sequence: next(), purpose: ConsentService.messaging, granted: granted, previous: nil,
                            actor: .server, source: format.consentSource, policyVersion: nil,
                            recordedAt: item.consentTime)
                    ]
                    counts.consentChanges += 1
                }
                for t in item.senderTokens {
                    senderTokens[key, default: [:]][SenderKey(sender: t.sender, scope: t.scope)] = (t.token, t.createdAt)
                }
            } else if let stored = installations[key] {
                if stored.lastSeenAt < item.installation.lastSeenAt {
                    installations[key] = Installation(
                        projectID: projectID, fid: stored.fid, appID: stored.appID,
                        refreshTokenHash: stored.refreshTokenHash, sdkVersion: stored.sdkVersion,
                        createdAt: stored.createdAt, lastSeenAt: item.installation.lastSeenAt)
                    counts.installationsUpdated += 1
                }
                if let wanted = item.messagingConsent, let current = consents[key]?[ConsentService.messaging],
                    current.granted != wanted, current.updatedAt < item.consentTime
                {
                    consents[key]?[ConsentService.messaging] = ConsentState(
                        purpose: ConsentService.messaging, granted: wanted, policyVersion: nil,
                        source: format.consentSource, actor: .server, updatedAt: item.consentTime)
                    ledger[key, default: []].append(
                        ConsentEvent(
                            sequence: next(), purpose: ConsentService.messaging, granted: wanted, previous: current.granted,
                            actor: .server, source: format.consentSource, policyVersion: nil,
                            recordedAt: item.consentTime))
                    counts.consentChanges += 1
                }
            }
            let consented = messagingConsent(key)
            if !consented, registrations[key]?.state == .active { registrations[key]?.state = .disabled }
            if var registration = item.registration {
                if !consented && registration.state == .active { registration.state = .disabled }
                if let holder = registrations.first(where: {
                    $0.key.projectID == projectID && $0.value.token == registration.token && $0.key != key
                }) {
                    guard holder.value.refreshedAt < registration.refreshedAt else {
                        counts.olderThanStored += 1
                        continue
                    }
                    registrations[holder.key] = nil
                }
                if registrations[key].map({ $0.refreshedAt < registration.refreshedAt }) ?? true {
                    if let stored = registrations[key] { registration.createdAt = stored.createdAt }
                    registrations[key] = registration
                    counts.registrationsWritten += 1
                }
            }
            if consented {
                for t in item.topics where topics[key]?[t.topic] == nil {
                    topics[key, default: [:]][t.topic] = t.createdAt
                    counts.topicsAdded += 1
                }
            }
            if let user = item.userID, let hash = item.userHash {
                let before = userBindings[key]
                if before == nil || (before!.binding.userID != user && before!.binding.boundAt < item.boundAt) {
                    userBindings[key] = (UserBinding(fid: key.fid, userID: user, boundAt: item.boundAt), hash)
                    history(
                        before == nil ? .bound : .moved, key, userID: user, userHash: hash,
                        previous: before.map { ($0.binding.userID, $0.userHash) }, at: item.boundAt)
                    counts.usersBound += 1
                }
            }
        }
        if dryRun {
            (installations, consents, ledger, registrations, topics, userBindings, bindingHistory, senderTokens,
                importedFrom, importRuns) = saved
        } else if let key {
            importRuns[projectID + "/" + key] = ImportRunState(rowsDone: rowsThrough, finished: false)
        }
        return counts
    }

    public func run(projectID: String, key: String) async throws -> ImportRunState? { importRuns[projectID + "/" + key] }

    public func finish(projectID: String, key: String, rows: Int) async throws {
        importRuns[projectID + "/" + key] = ImportRunState(rowsDone: rows, finished: true)
    }

    public func exportLedger(projectID: String, fid: String, after sequence: Int64, limit: Int) async throws
        -> [ConsentEvent]
    {
        Array((ledger[Key(projectID: projectID, fid: fid)] ?? []).filter { $0.sequence > sequence }.prefix(limit))
    }

    public func exportPage(projectID: String, after: String, limit: Int, ledgerLimit: Int) async throws
        -> [ExportedInstallation]
    {
        installations.filter { $0.key.projectID == projectID && $0.key.fid > after }.sorted { $0.key.fid < $1.key.fid }
            .prefix(limit).map { key, installation in
                ExportedInstallation(
                    installation: installation, importedFrom: importedFrom[key] ?? nil, registration: registrations[key],
                    senderTokens: (senderTokens[key] ?? [:]).map {
                        SenderTokenRecord(
                            sender: $0.key.sender, scope: $0.key.scope, token: $0.value.token,
                            createdAt: $0.value.createdAt, refreshedAt: $0.value.createdAt)
                    }.sorted { ($0.sender, $0.scope) < ($1.sender, $1.scope) },
                    consents: (consents[key] ?? [:]).values.sorted { $0.purpose < $1.purpose },
                    ledger: Array((ledger[key] ?? []).prefix(ledgerLimit)),
                    topics: (topics[key] ?? [:]).map { TopicSubscription(topic: $0.key, createdAt: $0.value) }
                        .sorted { $0.topic < $1.topic },
                    binding: userBindings[key]?.binding)
            }
    }
}
