import Synchronization

/// Group commit: concurrent single-statement writes gathered into one transaction, one round trip and one WAL flush.
/// The pool runs a second one for point reads (``PostgresPool/batchedRead(_:)``), `separately`: their statements go
/// out together but each is a transaction of its own, so a read that fails fails alone and none runs again; the gain
/// is the round trip (one connection taken and one PostgreSQL wake-up for the batch).
///
/// Each event loop has a lane. A write that finds its lane with a batch slot free runs at once (a lone request
/// never waits for company); otherwise it queues, and when a batch finishes, the next waiting write leads a batch of
/// everything queued behind it (up to ``maxBatch``). A batch is one pipeline of its statements and a Sync, which
/// PostgreSQL runs as one implicit transaction: every statement's answer is returned only after its commit, so an
/// acknowledged write is as durable as one committed alone.
///
/// Statements run in the order of their `key` (stable: writes with the same key keep their arrival order), so two
/// batches lock rows in the same order and cannot deadlock each other. When any statement of a batch fails, the
/// transaction rolled back all of them: each then runs again alone, and answers its own outcome. A lost connection
/// fails the whole batch (whether it committed is unknown, as for a single statement); lost while they run again
/// alone, it fails the one it was lost on and those after it, not those already answered.
///
/// A statement of a batch waits at most ``lockWait`` for a row another transaction holds (`lock_timeout`, for the
/// batch's transaction only). One that would wait longer leaves the batch and runs alone on a connection of its own,
/// with the ordinary waits, once the lane has gone on: a lock that one tenant holds (a long erasure, a batch of a
/// thousand installations' topics) holds that tenant's write, not the lane and every other tenant's writes in it.
///
/// A queued write waits at most ``queueTimeout`` (the pool's acquire time-out) for its batch to start; then it is
/// taken out of the queue, never to run, and fails as an acquire does. A queued read waits at most its own
/// ``queueTimeout`` (``PostgresPool/Configuration/readQueueLimit``), then runs alone (``Expiry``). One reaper task
/// sleeps until the earliest deadline, as the pool's does.
final class GroupCommitter: Sendable {
    struct Waiting: Sendable {
        let query: PostgresQuery
        let key: String
        let deadline: ContinuousClock.Instant
        let continuation: CheckedContinuation<Ticket, Never>
    }

    enum Ticket: Sendable {
        case done(Result<PostgresRows, PostgresError>)
        /// Lead a batch: the caller's own statement with these.
        case lead([Waiting])
        /// Run the statement alone, on a connection of its own: it waited ``queueTimeout`` (reads, ``Expiry/runAlone``).
        case alone
        /// Run the statement alone, with the ordinary waits: it waited ``lockWait`` for a lock in its batch. At most
        /// ``lockWaitersMax`` such writes wait at once (each holds a connection); beyond them a write fails as an
        /// acquire that timed out does (503, retry).
        case lockWaited
    }

    /// What becomes of a statement that waited ``queueTimeout`` in the queue.
    enum Expiry: Sendable {
        /// It fails, never to run, as an acquire that timed out (writes: the time-out is the pool's acquire time-out).
        case fail
        /// It leaves the queue and runs alone (reads: batches held up by a lock, say, hold up no read beyond the
        /// time-out; a read then costs a connection of its own, as it did unbatched).
        case runAlone
    }

    private struct Lane {
        var waiting: [Waiting] = []
        var batchesRunning = 0
    }

    private struct State {
        var lanes: [ObjectIdentifier?: Lane] = [:]
        var reaperRunning = false
    }

    /// At most this many statements in one transaction.
    let maxBatch: Int
    /// At most this many batches of one lane (one event loop) at once.
    let batchesPerLane: Int
    /// How long a write may wait in the queue for its batch.
    let queueTimeout: Duration
    /// How long a statement of a batch may wait for a lock before it leaves the batch to run alone (nil: unbounded).
    let lockWait: Duration?
    private let state = Mutex(State())
    /// Transactions run, the writes they carried, and writes run again alone after their batch failed: for metrics
    /// (writes ÷ transactions is the mean batch).
    let transactions = Atomic<Int>(0)
    let statements = Atomic<Int>(0)
    let retriedAlone = Atomic<Int>(0)
    /// Writes that left their batch after waiting ``lockWait`` for a lock, to run alone.
    let lockWaitsAlone = Atomic<Int>(0)

    /// Statements waiting for a batch, in every lane.
    var queued: Int { state.withLock { $0.lanes.values.reduce(0) { $0 + $1.waiting.count } } }

    /// Each statement a transaction of its own (reads): sent together, answered apart, none run again
    /// (``PostgresConnection/pipelineSeparately(_:)``).
    let separately: Bool
    let expiry: Expiry
    /// Statements that left the queue at ``queueTimeout`` to run alone (``Expiry/runAlone``).
    let ranAlone = Atomic<Int>(0)

    init(
        maxBatch: Int, batchesPerLane: Int, queueTimeout: Duration, separately: Bool = false, expiry: Expiry = .fail,
        lockWait: Duration? = nil, lockWaitersMax: Int = 4
    ) {
        self.lockWaitersMax = max(1, lockWaitersMax)
        self.separately = separately
        self.lockWait = separately ? nil : lockWait
        lockBounds = self.lockWait.map { (Self.lockBound($0), Self.lockBound($0 / 10)) }
        self.expiry = expiry
        self.maxBatch = max(1, maxBatch)
        self.batchesPerLane = max(1, batchesPerLane)
        self.queueTimeout = queueTimeout
    }

    /// `tenant` is counted when the statement runs on a connection of its own (``Ticket/alone``,
    /// ``Ticket/lockWaited``); a batch is no tenant's.
    func run(_ query: PostgresQuery, key: String, tenant: String?, on pool: PostgresPool) async throws -> PostgresRows {
        if isRecentlyBlocked(key) {
            blockedKeysAlone.add(1, ordering: .relaxed)
            return try await runAfterLockWait(query, tenant: tenant, pool: pool).get()
        }
        let lane = pool.loops.current.map { ObjectIdentifier($0) }
        // A free slot: lead at once, with no continuation made and resumed on the way.
        if state.withLock({ claimSlot(&$0, lane) }) {
            return try await lead(query, key: key, tenant: tenant, with: [], lane: lane, pool: pool).get()
        }
        let ticket = await withCheckedContinuation { (continuation: CheckedContinuation<Ticket, Never>) in
            let (leads, startReaper) = state.withLock { s -> (Bool, Bool) in
                if claimSlot(&s, lane) { return (true, false) }
                s.lanes[lane, default: Lane()].waiting.append(
                    Waiting(query: query, key: key, deadline: .now + queueTimeout, continuation: continuation))
                let startReaper = !s.reaperRunning
                s.reaperRunning = true
                return (false, startReaper)
            }
            if leads { continuation.resume(returning: .lead([])) }
            if startReaper { Task { [weak self] in await self?.reap() } }
        }
        switch ticket {
        case let .done(outcome):
            return try outcome.get()
        case let .lead(others):
            return try await lead(query, key: key, tenant: tenant, with: others, lane: lane, pool: pool).get()
        case .alone:
            return try await pool.query(query, tenant: tenant)
        case .lockWaited:
            return try await runAfterLockWait(query, tenant: tenant, pool: pool).get()
        }
    }

    /// Keys whose write waited ``lockWait`` for a lock in a batch lately, until when: their next writes skip the batch
    /// and wait alone from the start, so a row that stays locked (a tenant's chain of transactions on it) costs its
    /// lane one lock wait per ``blockedMemory``, not one per batch that carries a write of it. At most
    /// ``blockedKeysMax`` keys are remembered; past that a key is not (its writes are batched, as before).
    private let blocked = Mutex<(keys: [String: ContinuousClock.Instant], latest: ContinuousClock.Instant)>(([:], .now))
    /// How many keys `blocked` holds: read without the lock, so a write finds an empty memory for the cost of a load
    /// (the first write after the last key's memory ended empties it).
    private let blockedCount = Atomic<Int>(0)
    static let blockedKeysMax = 4096
    /// How long a key stays remembered after its write waited.
    var blockedMemory: Duration { (lockWait ?? .zero) * 4 }
    /// Writes that skipped their batch for a key remembered in `blocked`.
    let blockedKeysAlone = Atomic<Int>(0)

    private func isRecentlyBlocked(_ key: String) -> Bool {
        guard blockedCount.load(ordering: .relaxed) > 0 else { return false }
        let now = ContinuousClock.now
        return blocked.withLock { blocked in
            if blocked.latest <= now { blocked.keys.removeAll() }
            if let until = blocked.keys[key], until > now { return true }
            blocked.keys[key] = nil
            blockedCount.store(blocked.keys.count, ordering: .relaxed)
            return false
        }
    }

    private func rememberBlocked(_ keys: some Sequence<String>) {
        guard lockWait != nil else { return }
        let until = ContinuousClock.now + blockedMemory
        blocked.withLock { blocked in
            for key in keys {
                if blocked.keys.count >= Self.blockedKeysMax {
                    let now = ContinuousClock.now
                    blocked.keys = blocked.keys.filter { $0.value > now }
                    if blocked.keys.count >= Self.blockedKeysMax { break }
                }
                blocked.keys[key] = until
                blocked.latest = until
            }
            blockedCount.store(blocked.keys.count, ordering: .relaxed)
        }
    }

    /// Writes running alone after their batch's lock wait (``Ticket/lockWaited``) now, by tenant ("" for none).
    private let lockWaiters = Mutex<[String: Int]>([:])
    /// At most this many of one tenant's at once: each holds a connection while it waits, and a lock held long (an
    /// import's batch of thousands of installations) would otherwise have its installations' writes take the pool.
    /// Counted by tenant, so one tenant's writes waiting on its own locks never refuse another's.
    let lockWaitersMax: Int

    private func runAfterLockWait(_ query: PostgresQuery, tenant: String?, pool: PostgresPool) async
        -> Result<PostgresRows, PostgresError>
    {
        lockWaitsAlone.add(1, ordering: .relaxed)
        let counted = tenant ?? ""
        let admitted = lockWaiters.withLock { waiters in
            guard waiters[counted, default: 0] < lockWaitersMax else { return false }
            waiters[counted, default: 0] += 1
            return true
        }
        guard admitted else {
            return .failure(
                PostgresError(.poolTimeout, message: "too many writes are waiting for locks other transactions hold"))
        }
        defer {
            lockWaiters.withLock { waiters in
                let left = waiters[counted, default: 1] - 1
                waiters[counted] = left > 0 ? left : nil
            }
        }
        do {
            return .success(try await pool.query(query, tenant: tenant))
        } catch {
            return .failure(PostgresError.from(error))
        }
    }

    /// `lock_timeout` for a batch's transaction (``lockWait``), and for a run after its batch failed (a tenth of it).
    private let lockBounds: (first: PostgresQuery, rerun: PostgresQuery)?

    private static func lockBound(_ wait: Duration) -> PostgresQuery {
        "SELECT set_config('lock_timeout', \(String(wait.postgresMillis) + "ms"), true)"
    }

    /// The statements in one pipeline (one transaction), after `bound` when there is one; their answers.
    private func pipeline(_ statements: [PostgresQuery], bound: PostgresQuery?, on connection: PostgresConnection)
        async throws -> [Result<PostgresRows, PostgresError>]
    {
        guard let bound else { return try await connection.pipeline(statements) }
        return Array(try await connection.pipeline([bound] + statements).dropFirst())
    }

    /// Runs `ordered` as one transaction; their answers in that order. When one fails, the transaction rolled back
    /// every statement: a statement stopped waiting for a lock is answered as such, with every other of its key (they
    /// run alone later), and the rest run again as a batch; any other failure has each run again alone, for its own
    /// answer. Runs after the first wait a tenth of ``lockWait`` for a lock: a batch that holds many writes blocked on
    /// one tenant's lock costs the lane one ``lockWait`` and a few milliseconds each, not a ``lockWait`` each.
    private func runBatch(_ ordered: [PostgresQuery], keys: [String], on connection: PostgresConnection) async throws
        -> [Result<PostgresRows, PostgresError>]
    {
        var outcomes = [Result<PostgresRows, PostgresError>?](repeating: nil, count: ordered.count)
        var positions = Array(ordered.indices)
        var bound = lockBounds?.first
        var first = true
        while !positions.isEmpty {
            let results: [Result<PostgresRows, PostgresError>]
            do {
                results = try await pipeline(positions.map { ordered[$0] }, bound: bound, on: connection)
            } catch where !first {
                // Lost while running again: those already answered keep their answers (none of them committed).
                let failure = PostgresError.from(error)
                for position in positions { outcomes[position] = .failure(failure) }
                break
            }
            transactions.add(1, ordering: .relaxed)
            if first { statements.add(ordered.count, ordering: .relaxed) }
            first = false
            bound = lockBounds?.rerun
            guard positions.count > 1, let failed = results.firstIndex(where: { if case .failure = $0 { true } else { false } })
            else {
                for (position, result) in zip(positions, results) { outcomes[position] = result }
                break
            }
            if Self.waitedOnALock(results[failed]) {
                // Every write of that key leaves with it: they wait for the same row (one wait, not one each).
                let key = keys[positions[failed]]
                for position in positions where keys[position] == key { outcomes[position] = results[failed] }
                positions.removeAll { keys[$0] == key }
                continue
            }
            // Each runs again alone, its answer kept as it comes: a connection lost on a later one fails that one
            // and those after it, never one that already committed alone.
            retriedAlone.add(positions.count, ordering: .relaxed)
            transactions.add(positions.count, ordering: .relaxed)
            for (n, position) in positions.enumerated() {
                do {
                    outcomes[position] = try await pipeline([ordered[position]], bound: bound, on: connection)[0]
                } catch {
                    let failure = PostgresError.from(error)
                    for later in positions[n...] { outcomes[later] = .failure(failure) }
                    break
                }
            }
            break
        }
        return outcomes.map { $0 ?? .failure(PostgresError(.connectionFailed, message: "not run")) }
    }

    /// A statement that waited ``lockWait`` for a lock and was stopped (`lock_not_available`).
    static func waitedOnALock(_ outcome: Result<PostgresRows, PostgresError>) -> Bool {
        if case let .failure(error) = outcome, error.sqlState == "55P03" { return true }
        return false
    }

    /// Takes one of the lane's batch slots when one is free.
    private func claimSlot(_ s: inout State, _ lane: ObjectIdentifier?) -> Bool {
        guard s.lanes[lane, default: Lane()].batchesRunning < batchesPerLane else { return false }
        s.lanes[lane, default: Lane()].batchesRunning += 1
        return true
    }

    /// Runs the caller's statement with `others` as one batch, answers the others, and hands the lane's next batch
    /// to the first write waiting (or frees the slot).
    private func lead(
        _ query: PostgresQuery, key: String, tenant: String?, with others: [Waiting], lane: ObjectIdentifier?,
        pool: PostgresPool
    ) async -> Result<PostgresRows, PostgresError> {
        // Index 0 is the leader's own statement.
        var order = Array(0...others.count)
        let keys = [key] + others.map(\.key)
        order.sort { keys[$0] < keys[$1] || (keys[$0] == keys[$1] && $0 < $1) }
        let queries = [query] + others.map(\.query)
        var outcomes: [Result<PostgresRows, PostgresError>]
        do {
            outcomes = try await pool.withConnection { connection in
                let ordered = order.map { queries[$0] }
                if separately {
                    let results = try await connection.pipelineSeparately(ordered)
                    transactions.add(1, ordering: .relaxed)
                    statements.add(ordered.count, ordering: .relaxed)
                    return results
                }
                let results = try await runBatch(ordered, keys: order.map { keys[$0] }, on: connection)
                var byArrival = results
                for (position, index) in order.enumerated() { byArrival[index] = results[position] }
                return byArrival
            }
        } catch {
            let failure = PostgresError.from(error)
            outcomes = Array(repeating: .failure(failure), count: queries.count)
        }
        // The keys that waited are remembered: their next writes wait alone from the start.
        let waited = zip(keys, outcomes).filter { Self.waitedOnALock($0.1) }.map(\.0)
        if !waited.isEmpty { rememberBlocked(waited) }
        for (waiting, outcome) in zip(others, outcomes.dropFirst()) {
            if Self.waitedOnALock(outcome) {
                waiting.continuation.resume(returning: .lockWaited)
            } else {
                waiting.continuation.resume(returning: .done(outcome))
            }
        }
        let next = state.withLock { s -> [Waiting] in
            guard var state = s.lanes[lane] else { return [] }
            defer { s.lanes[lane] = state }
            if state.waiting.isEmpty {
                state.batchesRunning -= 1
                return []
            }
            let taken = Array(state.waiting.prefix(maxBatch))
            state.waiting.removeFirst(taken.count)
            return taken
        }
        if let first = next.first { first.continuation.resume(returning: .lead(Array(next.dropFirst()))) }
        guard Self.waitedOnALock(outcomes[0]) else { return outcomes[0] }
        return await runAfterLockWait(query, tenant: tenant, pool: pool)
    }

    static var timeoutError: PostgresError {
        PostgresError(.poolTimeout, message: "no database connection free in time for the write's batch")
    }

    /// Fails the queued writes whose time ran out, sleeping until the next deadline; ends when none is queued.
    private func reap() async {
        while true {
            let (expired, next) = state.withLock { s -> ([Waiting], ContinuousClock.Instant?) in
                let now = ContinuousClock.now
                var expired: [Waiting] = []
                var next: ContinuousClock.Instant?
                for lane in s.lanes.keys {
                    s.lanes[lane]!.waiting.removeAll { waiting in
                        if waiting.deadline <= now {
                            expired.append(waiting)
                            return true
                        }
                        next = min(next ?? waiting.deadline, waiting.deadline)
                        return false
                    }
                }
                if next == nil { s.reaperRunning = false }
                return (expired, next)
            }
            for waiting in expired {
                switch expiry {
                case .fail: waiting.continuation.resume(returning: .done(.failure(GroupCommitter.timeoutError)))
                case .runAlone:
                    ranAlone.add(1, ordering: .relaxed)
                    waiting.continuation.resume(returning: .alone)
                }
            }
            guard let next else { return }
            try? await Task.sleep(until: next, clock: .continuous)
        }
    }
}
