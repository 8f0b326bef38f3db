import Foundation
import Registry

// MARK: - Catalog, signing keys, health

extension InMemoryStores: CatalogStore, SigningKeyStore, StoreHealth {
    public func insertProject(_ project: Project, serverKeyHash: [UInt8]) async throws {
        guard projects[project.id] == nil, !projects.values.contains(where: { $0.number == project.number }) else {
            throw RegistryError(.alreadyExists, "a project with this ID or number already exists")
        }
        projects[project.id] = project
        serverKeys[serverKeyHash] = project.id
        serverKeyOrder.append(serverKeyHash)
    }

    public func insertApp(_ app: App) async throws {
        guard apps[app.id] == nil else { throw RegistryError(.alreadyExists, "the resource already exists") }
        guard !apps.values.contains(where: { $0.apiKey == app.apiKey && $0.projectID != app.projectID }) else {
            throw RegistryError(.alreadyExists, Catalog.keyOfAnotherProject)
        }
        apps[app.id] = app
    }

    public func project(idOrNumber: String) async throws -> Project? {
        projects[idOrNumber] ?? projects.values.first { String($0.number) == idOrNumber }
    }

    public func app(id: String) async throws -> App? { apps[id] }

    public func apps(apiKey: String) async throws -> [App] {
        apps.values.filter { $0.apiKey == apiKey }.sorted { $0.id < $1.id }
    }

    public func projectID(serverKeyHash: [UInt8]) async throws -> String? {
        guard let project = serverKeys[serverKeyHash] else { return nil }
        if let expires = serverKeyExpiry[serverKeyHash], expires <= clock.now() { return nil }
        return project
    }

    public func addServerKey(projectID: String, hash: [UInt8], at: Date, othersExpireAt: Date) async throws {
        for (other, project) in serverKeys where project == projectID {
            if serverKeyExpiry[other].map({ $0 > othersExpireAt }) ?? true { serverKeyExpiry[other] = othersExpireAt }
        }
        serverKeys[hash] = projectID
        serverKeyOrder.append(hash)
    }

    public func revokeServerKeys(projectID: String, keepNewest: Bool, at: Date) async throws -> Int {
        let keys = serverKeyOrder.filter { serverKeys[$0] == projectID }
        var revoked = 0
        for key in keepNewest ? keys.dropLast() : keys[...] where serverKeyExpiry[key].map({ $0 > at }) ?? true {
            serverKeyExpiry[key] = at
            revoked += 1
        }
        return revoked
    }

    public func apps(projectID: String) async throws -> [App] {
        apps.values.filter { $0.projectID == projectID }.sorted { $0.id < $1.id }
    }

    public func all() async throws -> [StoredSigningKey] { signingKeys }

    public func insert(_ key: StoredSigningKey) async throws { signingKeys.append(key) }

    public func insertFirst(_ key: StoredSigningKey) async throws {
        if !signingKeys.contains(where: { $0.retiredAt == nil }) { signingKeys.append(key) }
    }

    public func retire(kid: String, at: Date) async throws -> Bool {
        guard let index = signingKeys.firstIndex(where: { $0.kid == kid && $0.retiredAt == nil }) else { return false }
        let key = signingKeys[index]
        signingKeys[index] = StoredSigningKey(
            kid: key.kid, privatePEM: key.privatePEM, createdAt: key.createdAt, retiredAt: at)
        return true
    }

    public func unreadiness() async -> String? { nil }

    public nonisolated var statistics: StoreStatistics { StoreStatistics() }

    public nonisolated func close() {}
}

// MARK: - Topics and targeting

extension InMemoryStores: TopicStore, TargetingStore {
    public func add(projectID: String, fids: [String], topic: String, at: Date) async throws -> [String:
        SubscribeResult]
    {
        var results: [String: SubscribeResult] = [:]
        for fid in fids where results[fid] == nil {
            let key = Key(projectID: projectID, fid: fid)
            let result = SubscribeResult.decide(
                exists: installations[key] != nil, subscribed: topics[key]?[topic] != nil,
                consented: messagingConsent(key), count: topics[key]?.count ?? 0)
            if result == .added { topics[key, default: [:]][topic] = at }
            results[fid] = result
        }
        return results
    }

    public func remove(projectID: String, fids: [String], topic: String) async throws -> Set<String> {
        Set(fids.filter { topics[Key(projectID: projectID, fid: $0)]?.removeValue(forKey: topic) != nil })
    }

    public func created(projectID: String, fid: String, topic: String) async throws -> Date? {
        topics[Key(projectID: projectID, fid: fid)]?[topic]
    }

    public func list(projectID: String, fid: String, after: String?, limit: Int) async throws -> [TopicSubscription] {
        (topics[Key(projectID: projectID, fid: fid)] ?? [:]).filter { $0.key > (after ?? "") }.sorted {
            $0.key < $1.key
        }
        .prefix(limit).map { TopicSubscription(topic: $0.key, createdAt: $0.value) }
    }

    /// Registrations of the project that pass `filter`, in FID order, for which `matches` holds.
    func live(_ filter: TargetFilter, where matches: (Key) -> Bool) -> [LiveRegistration] {
        registrations.filter { key, r in
            key.projectID == filter.projectID && key.fid > (filter.after ?? "")
                && filter.admits(state: r.state, refreshedAt: r.refreshedAt, messagingConsent: messagingConsent(key))
                && matches(key)
        }.sorted { $0.key.fid < $1.key.fid }.prefix(filter.limit).map {
            LiveRegistration(
                fid: $0.key.fid, token: $0.value.token, platform: $0.value.platform, refreshedAt: $0.value.refreshedAt,
                quarantined: $0.value.quarantine != nil)
        }
    }

    public func members(topic: String, filter: TargetFilter) async throws -> [LiveRegistration] {
        live(filter) { topics[$0]?[topic] != nil }
    }

    public func resolve(condition: Condition, filter: TargetFilter) async throws -> [LiveRegistration] {
        live(filter) { key in
            Self.holds(condition, topics: Set((topics[key] ?? [:]).keys), user: userBindings[key]?.binding.userID)
        }
    }

    static func holds(_ condition: Condition, topics: Set<String>, user: String?) -> Bool {
        switch condition {
        case let .topic(name): return topics.contains(name)
        case let .users(ids): return user.map(ids.contains) ?? false
        case let .not(inner): return !holds(inner, topics: topics, user: user)
        case let .and(a, b): return holds(a, topics: topics, user: user) && holds(b, topics: topics, user: user)
        case let .or(a, b): return holds(a, topics: topics, user: user) || holds(b, topics: topics, user: user)
        }
    }
}

// MARK: - Service accounts

extension InMemoryStores: ServiceAccountStore {
    public func insert(_ account: ServiceAccount) async throws { serviceAccounts[account.keyID] = account }

    public func account(keyID: String) async throws -> ServiceAccount? { serviceAccounts[keyID] }

    public func account(clientEmail: String) async throws -> ServiceAccount? {
        serviceAccounts.values.first { $0.clientEmail == clientEmail }
    }

    public func accounts(projectID: String) async throws -> [ServiceAccount] {
        serviceAccounts.values.filter { $0.projectID == projectID }.sorted { ($0.createdAt, $0.keyID) < ($1.createdAt, $1.keyID) }
    }

    public func revoke(keyID: String, at: Date) async throws -> Bool {
        guard let a = serviceAccounts[keyID], a.revokedAt == nil else { return false }
        serviceAccounts[keyID] = ServiceAccount(
            projectID: a.projectID, keyID: a.keyID, clientEmail: a.clientEmail, publicKeyPEM: a.publicKeyPEM,
            tokenURI: a.tokenURI, createdAt: a.createdAt, revokedAt: at)
        return true
    }
}

// MARK: - Check-ins

extension InMemoryStores: CheckinStore {
    public func insert(_ checkin: StoredCheckin, at: Date) async throws {
        guard checkins[checkin.androidID] == nil else {
            throw RegistryError(.alreadyExists, "the resource already exists")
        }
        checkins[checkin.androidID] = checkin
        checkinSeen[checkin.androidID] = at
    }

    public func enroll(_ checkin: StoredCheckin, at: Date, limit: Int) async throws -> Bool {
        guard checkins.values.filter({ $0.projectID == checkin.projectID && $0.fid == checkin.fid }).count < limit
        else { return false }
        try await insert(checkin, at: at)
        return true
    }

    public func checkin(androidID: UInt64) async throws -> StoredCheckin? {
        guard let stored = checkins[androidID] else { return nil }
        // A deleted installation leaves its check-ins unbound, as the foreign key's SET NULL does in SQL.
        if let project = stored.projectID, let fid = stored.fid, installations[Key(projectID: project, fid: fid)] == nil
        {
            return StoredCheckin(
                androidID: androidID, securityTokenHash: stored.securityTokenHash, projectID: nil, fid: nil)
        }
        return stored
    }

    public func touch(androidID: UInt64, at: Date) async throws {
        if checkins[androidID] != nil { checkinSeen[androidID] = at }
    }

    public func purgeUnused(before cutoff: Date, limit: Int) async throws -> Int {
        var unbound: Set<UInt64> = []
        for id in checkins.keys where try await checkin(androidID: id)?.fid == nil { unbound.insert(id) }
        let unused = checkins.keys.filter { id in
            unbound.contains(id) && (checkinSeen[id] ?? .distantPast) < cutoff
                && !gcmTokens.keys.contains { $0.hasPrefix("\(id)\u{0}") }
        }.sorted { (checkinSeen[$0] ?? .distantPast) < (checkinSeen[$1] ?? .distantPast) }.prefix(limit)
        for id in unused {
            checkins[id] = nil
            checkinSeen[id] = nil
        }
        return unused.count
    }

    public func bind(androidID: UInt64, projectID: String, fid: String) async throws -> Bool {
        guard let current = try await checkin(androidID: androidID),
            current.fid == nil || (current.projectID == projectID && current.fid == fid)
        else { return false }
        checkins[androidID] = StoredCheckin(
            androidID: androidID, securityTokenHash: current.securityTokenHash, projectID: projectID, fid: fid)
        return true
    }

    public func rebind(androidID: UInt64, projectID: String, fid: String, from previousFID: String) async throws
        -> Bool
    {
        guard let current = try await checkin(androidID: androidID), current.projectID == projectID,
            current.fid == previousFID
        else { return false }
        checkins[androidID] = StoredCheckin(
            androidID: androidID, securityTokenHash: current.securityTokenHash, projectID: projectID, fid: fid)
        return true
    }

    public func gcmToken(
        androidID: UInt64, app: String, subtype: String, candidate: String, at: Date, limit: Int
    ) async throws -> String {
        guard checkins[androidID] != nil else {
            throw RegistryError(.unauthenticated, "unknown check-in credentials")
        }
        checkinSeen[androidID] = max(checkinSeen[androidID] ?? at, at)
        let key = "\(androidID)\u{0}\(app)\u{0}\(subtype)"
        if let token = gcmTokens[key] { return token }
        guard gcmTokens.keys.filter({ $0.hasPrefix("\(androidID)\u{0}") }).count < limit else {
            throw RegistryError(
                .resourceExhausted, "a check-in may hold at most \(limit) registrations", field: "subtype")
        }
        gcmTokens[key] = candidate
        return candidate
    }

    public func deleteGCMToken(androidID: UInt64, app: String, subtype: String) async throws -> String? {
        gcmTokens.removeValue(forKey: "\(androidID)\u{0}\(app)\u{0}\(subtype)")
    }
}
