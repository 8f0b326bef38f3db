import Foundation
import JSON
import Postgres
import Registry

/// ``UserStore`` and ``SubjectStore`` on PostgreSQL: `user_bindings` and `user_binding_history` (migration 23).
///
/// Locks, always in this order: the users' (``lockUsers(hashes:on:)``, sorted), then the installation's row. A
/// bind takes the lock of the user it leaves and of the one it joins, an unbind the one it leaves, an erasure the
/// user's: so a login, a logout and an erasure of one person queue behind each other, and none deletes or moves an
/// installation another has just moved.
struct PostgresUserStore: UserStore, SubjectStore {
    let db: Database

    /// The advisory lock class of users (two-key form: it shares no key with the jobs' one-key locks).
    static let lockClass = 7_627_861

    /// How long a request waits for a person's lock before it answers 503 with Retry-After (55P03): a person whose
    /// lock is held long (a large erasure) never holds connections of everyone else's requests.
    static let lockWait = "3s"

    /// Takes the transaction-scoped locks of the users whose keyed hashes (``UserService/userHash(projectID:userID:)``,
    /// the stored `user_hmac`) are `hashes`, in the order of their keys (two users whose keys collide share one lock;
    /// sorting by the key, not the name, keeps the order one).
    ///
    /// The key is 32 bits of the keyed hash: the lock space is shared by every project, and a key computed from the
    /// names alone (`hashtext`, public and unseeded) let one tenant find, offline, a user of its own whose lock is
    /// another tenant's user's, and hold it with erasures. Without the deployment's key nobody can aim a collision.
    static func lockUsers(hashes: [[UInt8]], on c: PostgresConnection) async throws {
        try await c.query("SELECT set_config('lock_timeout', \(lockWait), true)::text AS set")
        for key in Set(hashes.map(lockKey)).sorted() {
            try await c.query("SELECT pg_advisory_xact_lock(\(lockClass), \(Int(key))::int)::text AS locked")
        }
    }

    /// The advisory lock key of a user's keyed hash: its first four bytes, as a signed 32-bit integer.
    static func lockKey(_ hash: [UInt8]) -> Int32 {
        Int32(bitPattern: hash.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
    }

    private enum Attempt: Sendable {
        case done(BindResult?)
        case raced
    }

    func bind(_ r: BindingRequest) async throws -> BindResult? {
        // The user the installation leaves is read before its lock is taken; if another bind moved it meanwhile, the
        // transaction ends and runs again with the new one.
        for _ in 0..<8 {
            let attempt: Attempt = try await db.transaction { c in
                let leaving = try await Self.current(projectID: r.projectID, fid: r.fid, on: c)
                let before = leaving?.binding.userID
                try await Self.lockUsers(hashes: [r.userHash] + (leaving.map { [$0.hash.bytes] } ?? []), on: c)
                let installation = try await c.query(
                    "SELECT 1 FROM installations WHERE project_id = \(r.projectID) AND fid = \(r.fid) FOR NO KEY UPDATE")
                guard !installation.isEmpty else { return .done(nil) }
                let stored = try await Self.current(projectID: r.projectID, fid: r.fid, on: c)
                let current = stored?.binding
                guard current?.userID.utf8.elementsEqual((before ?? "").utf8) ?? (before == nil) else { return .raced }
                if let current, current.userID.utf8.elementsEqual(r.userID.utf8) {
                    return .done(BindResult(binding: current, change: .unchanged, displaced: []))
                }
                let displaced = try await makeRoom(r, on: c)
                let previous = stored?.hash
                try await c.query(
                    """
                    INSERT INTO user_bindings (project_id, fid, user_id, user_hmac, bound_at)
                    VALUES (\(r.projectID), \(r.fid), \(r.userID), \(ByteA(r.userHash)), \(r.at))
                    ON CONFLICT (project_id, fid) DO UPDATE SET user_id = excluded.user_id,
                        user_hmac = excluded.user_hmac, bound_at = excluded.bound_at
                    """)
                let action: BindingAction = current == nil ? .bound : .moved
                try await Self.record(
                    action, projectID: r.projectID, fid: r.fid, userID: r.userID, userHash: ByteA(r.userHash),
                    previous: current.map { ($0.userID, previous) }, at: r.at, on: c)
                var payload: [(String, JSONValue)] = [("userId", .string(r.userID))]
                if let current { payload.append(("previousUserId", .string(current.userID))) }
                try await Outbox.append(
                    current == nil ? .userBound : .userMoved, projectID: r.projectID, fid: r.fid,
                    payload: .object(payload), on: c)
                let binding = UserBinding(fid: r.fid, userID: r.userID, boundAt: r.at)
                return .done(
                    BindResult(
                        binding: binding, change: current.map { .moved(from: $0.userID) } ?? .bound,
                        displaced: displaced))
            }
            if case let .done(result) = attempt { return result }
        }
        throw RegistryError(.unavailable, "the installation's user kept changing; try again")
    }

    /// Applies the user's cap, under the user's lock: refuses, or unbinds the least recently seen installations.
    private func makeRoom(_ r: BindingRequest, on c: PostgresConnection) async throws -> [String] {
        let count: Int =
            try await c.query(
                "SELECT count(*)::int AS n FROM user_bindings WHERE project_id = \(r.projectID) AND user_id = \(r.userID)"
            ).first?.require("n") ?? 0
        let limit = r.policy.maxInstallationsPerUser
        guard count >= limit else { return [] }
        guard r.policy.overflow == .unbindLeastRecentlySeen else {
            throw RegistryError(
                .resourceExhausted, "userId: the user has \(limit) installations bound, the most a user may have",
                field: "userId")
        }
        // The installations it unbinds are locked first, in FID order, as every writer of an installation locks it
        // before its rows (a concurrent delete of one either went before or waits: no cycle).
        try await c.query(
            """
            SELECT 1 FROM installations i WHERE (i.project_id, i.fid) IN (
                SELECT b.project_id, b.fid FROM user_bindings b JOIN installations j USING (project_id, fid)
                WHERE b.project_id = \(r.projectID) AND b.user_id = \(r.userID)
                ORDER BY j.last_seen_at, b.fid LIMIT \(count - limit + 1))
            ORDER BY i.fid COLLATE "C" FOR NO KEY UPDATE
            """)
        let victims = try await c.query(
            """
            DELETE FROM user_bindings ub WHERE (ub.project_id, ub.fid) IN (
                SELECT b.project_id, b.fid FROM user_bindings b JOIN installations i USING (project_id, fid)
                WHERE b.project_id = \(r.projectID) AND b.user_id = \(r.userID)
                ORDER BY i.last_seen_at, b.fid LIMIT \(count - limit + 1))
            RETURNING ub.fid, ub.user_hmac
            """)
        var fids: [String] = []
        for row in victims {
            let fid: String = try row.require("fid")
            try await Self.record(
                .displaced, projectID: r.projectID, fid: fid, userID: r.userID,
                userHash: try row.require("user_hmac", as: ByteA.self), previous: nil, at: r.at, on: c)
            try await Outbox.append(
                .userUnbound, projectID: r.projectID, fid: fid,
                payload: ["userId": .string(r.userID), "reason": "displaced"], on: c)
            fids.append(fid)
        }
        return fids.sorted()
    }

    /// The installation's binding and its user's keyed hash, in `c`'s transaction.
    static func current(projectID: String, fid: String, on c: PostgresConnection) async throws -> (
        binding: UserBinding, hash: ByteA
    )? {
        try await c.query(
            "SELECT fid, user_id, user_hmac, bound_at FROM user_bindings WHERE project_id = \(projectID) AND fid = \(fid)"
        ).first.map { (try Self.binding($0), try $0.require("user_hmac", as: ByteA.self)) }
    }

    static func binding(_ row: PostgresRow) throws -> UserBinding {
        UserBinding(fid: try row.require("fid"), userID: try row.require("user_id"), boundAt: try row.require("bound_at"))
    }

    static func record(
        _ action: BindingAction, projectID: String, fid: String, userID: String, userHash: ByteA,
        previous: (userID: String, hash: ByteA?)?, at: Date, on c: PostgresConnection
    ) async throws {
        try await c.query(
            """
            INSERT INTO user_binding_history (project_id, fid, action, user_id, user_hmac, previous_user_id,
                previous_user_hmac, at)
            VALUES (\(projectID), \(fid), \(action.rawValue), \(userID), \(userHash), \(previous?.userID),
                \(previous?.hash), \(at))
            """)
    }

    func unbind(projectID: String, fid: String, at: Date) async throws -> UserBinding? {
        for _ in 0..<8 {
            let attempt: (UserBinding?, raced: Bool) = try await db.transaction { c in
                guard let (before, hash) = try await Self.current(projectID: projectID, fid: fid, on: c) else {
                    return (nil, false)
                }
                try await Self.lockUsers(hashes: [hash.bytes], on: c)
                let removed = try await c.query(
                    """
                    DELETE FROM user_bindings WHERE project_id = \(projectID) AND fid = \(fid) AND user_id = \(before.userID)
                    RETURNING fid, user_id, user_hmac, bound_at
                    """)
                guard let row = removed.first else { return (nil, true) }
                try await Self.record(
                    .unbound, projectID: projectID, fid: fid, userID: before.userID,
                    userHash: try row.require("user_hmac", as: ByteA.self), previous: nil, at: at, on: c)
                try await Outbox.append(
                    .userUnbound, projectID: projectID, fid: fid,
                    payload: ["userId": .string(before.userID), "reason": "logout"], on: c)
                return (try Self.binding(row), false)
            }
            if !attempt.raced { return attempt.0 }
        }
        throw RegistryError(.unavailable, "the installation's user kept changing; try again")
    }

    func binding(projectID: String, fid: String) async throws -> UserBinding? {
        try await db.query(
            "SELECT fid, user_id, bound_at FROM user_bindings WHERE project_id = \(projectID) AND fid = \(fid)"
        ).first.map(Self.binding)
    }

    func bindings(projectID: String, userID: String) async throws -> [UserBinding] {
        try await db.query(
            """
            SELECT fid, user_id, bound_at FROM user_bindings WHERE project_id = \(projectID) AND user_id = \(userID)
            ORDER BY fid
            """
        ).map(Self.binding)
    }

    func bindings(projectID: String, userHash: [UInt8]) async throws -> [UserBinding] {
        try await db.query(
            """
            SELECT fid, user_id, bound_at FROM user_bindings
            WHERE project_id = \(projectID) AND user_hmac = \(ByteA(userHash)) ORDER BY fid
            """
        ).map(Self.binding)
    }

    func history(projectID: String, fid: String) async throws -> [BindingEvent] {
        try await db.query(
            "SELECT * FROM user_binding_history WHERE project_id = \(projectID) AND fid = \(fid) ORDER BY seq"
        ).map { try Self.event($0, only: nil) }
    }

    func history(projectID: String, userHash: [UInt8]) async throws -> [BindingEvent] {
        try await db.query(
            """
            SELECT * FROM user_binding_history WHERE project_id = \(projectID)
              AND (user_hmac = \(ByteA(userHash)) OR previous_user_hmac = \(ByteA(userHash)))
            ORDER BY seq
            """
        ).map { try Self.event($0, only: userHash) }
    }

    /// A history row; with `only`, the clear ID of any other user than that one is left out (a person's export never
    /// names the user a shared device moved to or from).
    static func event(_ row: PostgresRow, only: [UInt8]?) throws -> BindingEvent {
        let userHash = try row.require("user_hmac", as: ByteA.self).bytes
        let previousHash = try row.decode("previous_user_hmac", as: ByteA.self)?.bytes
        let userID: String? = try row.decode("user_id")
        let previousID: String? = try row.decode("previous_user_id")
        return BindingEvent(
            fid: try row.require("fid"), action: try row.require("action", as: BindingAction.self),
            userID: only == nil || only == userHash ? userID : nil, userHash: userHash,
            previousUserID: only == nil || only == previousHash ? previousID : nil, previousUserHash: previousHash,
            at: try row.require("at"))
    }

    // MARK: - Subject reads

    func senderTokens(projectID: String, fid: String) async throws -> [SenderTokenRecord] {
        try await db.query(
            """
            SELECT sender, scope, token, created_at, refreshed_at FROM sender_tokens
            WHERE project_id = \(projectID) AND fid = \(fid) ORDER BY sender, scope
            """
        ).map {
            SenderTokenRecord(
                sender: try $0.require("sender"), scope: try $0.require("scope"), token: try $0.require("token"),
                createdAt: try $0.require("created_at"), refreshedAt: try $0.require("refreshed_at"))
        }
    }

    func events(projectID: String, fid: String, after sequence: Int64, limit: Int) async throws -> [FeedEvent] {
        try await db.query(
            """
            SELECT seq, type, fid, data, created_at FROM events
            WHERE project_id = \(projectID) AND fid = \(fid) AND seq > \(sequence) ORDER BY seq LIMIT \(limit)
            """
        ).map(PostgresChangeFeedStore.event)
    }

    func pendingEvents(projectID: String, fid: String, after id: Int64, limit: Int) async throws
        -> [(id: Int64, event: FeedEvent)]
    {
        // Not yet relayed: no feed number yet (0). The outbox is read by its own order (`id`); the relay empties it
        // within a second, so the look-up by installation reads a few rows, but for a relay that has stopped.
        try await db.query(
            """
            SELECT id, 0 AS seq, type, fid, data, created_at FROM event_outbox
            WHERE project_id = \(projectID) AND fid = \(fid) AND id > \(id) ORDER BY id LIMIT \(limit)
            """
        ).map { (try $0.require("id"), try PostgresChangeFeedStore.event($0)) }
    }

}
