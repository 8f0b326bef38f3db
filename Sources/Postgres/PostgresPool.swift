import Foundation
import Synchronization

/// A bounded pool of connections with waiting, acquire time-outs, cancellation and reconnect back-off.
///
/// A `final class` with its state behind one `Mutex` rather than an actor: taking and returning a connection are a
/// few instructions under a lock, not two executor hops per query. Only a caller that must wait suspends. Every
/// decision is made by ``PoolStateMachine`` under that lock (and unit-tested there); this class only carries the
/// decisions out: it resumes waiters, opens connections and runs the time-outs.
///
/// When the database is unreachable, the pool fails fast for a back-off window (50 ms doubling to 500 ms)
/// instead of letting every request wait on a connect; the first success resets it. A connection whose server turned
/// read-only (a demoted primary, a standby) is dropped, so the next one finds the new primary through a multi-host
/// `target_session_attrs=read-write` URL.
public final class PostgresPool: Sendable {
    public struct Configuration: Sendable {
        public var conninfo: String
        public var maxConnections: Int
        /// How long an acquire waits for a free connection before failing with `.poolTimeout`.
        public var acquireTimeout: Duration
        /// Set as each connection's `statement_timeout`, so one slow statement cannot hold a connection for ever;
        /// nil leaves the server's setting.
        public var statementTimeout: Duration?
        /// ``PostgresPool/groupCommitted(_:key:)``: at most this many statements in one transaction (1: none
        /// gathered), and at most this many such transactions at once per event loop.
        public var groupCommitBatch: Int
        public var groupCommitsPerLoop: Int
        /// ``PostgresPool/batchedRead(_:)``: at most this many concurrent point reads in one round trip (1: each
        /// alone), and at most ``groupCommitsPerLoop`` such round trips at once per event loop.
        public var readBatch: Int
        /// How long a read waits for a batch before it runs alone: batches that a lock holds up (a migration's, say)
        /// hold up the reads queued behind them no longer than this. A batch's round trip takes a millisecond or two.
        public var readQueueLimit: Duration = .milliseconds(50)
        /// How long a statement of a group-committed batch waits for a lock before it leaves the batch and runs alone
        /// (``GroupCommitter/lockWait``); nil: as long as the statement time-out allows, holding the batch.
        public var groupCommitLockWait: Duration? = .milliseconds(250)
        /// True when `conninfo` names a pooler in transaction mode
        /// (``PostgresConnection/SessionSettings/transactionPooled``).
        public var transactionPooled: Bool
        /// The most connections one tenant (a caller's `tenant`: a project) holds at once (``PoolStateMachine``); nil:
        /// a quarter of ``maxConnections``, at least one. Group commit's batches are no tenant's: they carry every
        /// tenant's writes.
        public var tenantShare: Int?

        public init(
            conninfo: String, maxConnections: Int = 10, acquireTimeout: Duration = .seconds(5),
            statementTimeout: Duration? = .seconds(30), groupCommitBatch: Int = 64, groupCommitsPerLoop: Int = 2,
            readBatch: Int = 64, transactionPooled: Bool = false
        ) {
            self.conninfo = conninfo
            self.maxConnections = max(1, maxConnections)
            self.acquireTimeout = acquireTimeout
            self.statementTimeout = statementTimeout
            self.groupCommitBatch = max(1, groupCommitBatch)
            self.groupCommitsPerLoop = max(1, groupCommitsPerLoop)
            self.readBatch = max(1, readBatch)
            self.transactionPooled = transactionPooled
        }

        /// ``tenantShare`` as applied.
        var share: Int { max(1, min(tenantShare ?? maxConnections / 4, maxConnections)) }

        var session: PostgresConnection.SessionSettings {
            .init(statementTimeoutMillis: statementTimeout?.postgresMillis, transactionPooled: transactionPooled)
        }
    }

    /// Connections in use, idle and callers waiting, for metrics.
    public struct Statistics: Sendable {
        public let inUse: Int
        public let idle: Int
        public let waiting: Int
        /// Idle connections placed on an event loop (the rest have threads of their own).
        public let idleOnLoops: Int
        /// Writes queued for a group commit behind the transactions running.
        public let queuedWrites: Int
        /// Since the pool opened: group commit's transactions, the writes they carried, and writes run again alone
        /// after a failure in their batch.
        public var groupCommits = 0
        public var groupCommittedWrites = 0
        public var writesRetriedAlone = 0
        /// Writes that left their batch after waiting ``Configuration/groupCommitLockWait`` for a lock, to run alone,
        /// and (among them) writes of a key that waited so lately, which skipped the batch.
        public var writesLockWaitedAlone = 0
        public var writesOfBlockedKeysAlone = 0
        /// Point reads queued for a batch now; since the pool opened, round trips of batched reads and the reads
        /// they carried (``PostgresPool/batchedRead(_:)``).
        public var queuedReads = 0
        public var readBatches = 0
        public var batchedReads = 0
        /// Reads that waited ``Configuration/readQueueLimit`` for a batch and ran alone.
        public var readsRunAlone = 0
    }

    /// What a waiter is handed: a connection, or a reserved slot to open one in.
    private enum Grant: Sendable {
        case connection(PostgresConnection)
        case slot
    }

    private typealias Machine = PoolStateMachine<PostgresConnection>
    private typealias Resumption = (CheckedContinuation<Grant, any Error>, Result<Grant, any Error>)

    private struct State {
        var machine: Machine
        var continuations: [UInt64: CheckedContinuation<Grant, any Error>] = [:]
        /// When each waiter's acquire times out; one reaper task sleeps until the earliest (not a timer per waiter:
        /// under load most acquires wait briefly, and a task per wait costs two thread wake-ups).
        var deadlines: [UInt64: ContinuousClock.Instant] = [:]
        var reaperRunning = false
        var nextID: UInt64 = 0

        /// The continuation a waiter action answers, with its answer; its timer is cancelled.
        mutating func take(_ action: Machine.WaiterAction) -> Resumption? {
            let id: UInt64
            let result: Result<Grant, any Error>
            switch action {
            case let .lease(waiter, connection): (id, result) = (waiter, .success(.connection(connection)))
            case let .open(waiter): (id, result) = (waiter, .success(.slot))
            case let .fail(waiter, error): (id, result) = (waiter, .failure(error))
            }
            deadlines[id] = nil
            // A waiter is registered together with its continuation, under the same lock: it is always here.
            return continuations.removeValue(forKey: id).map { ($0, result) }
        }
    }

    public let configuration: Configuration
    /// The event loops connections are placed on, once attached (``PostgresEventLoopGroup``).
    public let loops = PostgresEventLoopGroup()
    private let state: Mutex<State>
    private let committer: GroupCommitter
    /// Point reads gathered as writes are, with lanes and slots of their own: a read never queues behind a batch of
    /// writes waiting for its WAL flush or a lock.
    private let reads: GroupCommitter

    public init(_ configuration: Configuration) {
        self.configuration = configuration
        committer = GroupCommitter(
            maxBatch: configuration.groupCommitBatch, batchesPerLane: configuration.groupCommitsPerLoop,
            queueTimeout: configuration.acquireTimeout, lockWait: configuration.groupCommitLockWait,
            lockWaitersMax: configuration.share)
        reads = GroupCommitter(
            maxBatch: configuration.readBatch, batchesPerLane: configuration.groupCommitsPerLoop,
            queueTimeout: configuration.readQueueLimit, separately: true, expiry: .runAlone)
        state = Mutex(
            State(machine: Machine(maxConnections: configuration.maxConnections, tenantShare: configuration.share)))
    }

    public var statistics: Statistics {
        let queued = committer.queued
        var statistics = state.withLock {
            Statistics(
                inUse: $0.machine.inUse, idle: $0.machine.idleCount, waiting: $0.machine.waiting,
                idleOnLoops: $0.machine.idle.count { $0.loop != nil }, queuedWrites: queued)
        }
        statistics.groupCommits = committer.transactions.load(ordering: .relaxed)
        statistics.groupCommittedWrites = committer.statements.load(ordering: .relaxed)
        statistics.writesRetriedAlone = committer.retriedAlone.load(ordering: .relaxed)
        statistics.writesLockWaitedAlone = committer.lockWaitsAlone.load(ordering: .relaxed)
        statistics.writesOfBlockedKeysAlone = committer.blockedKeysAlone.load(ordering: .relaxed)
        statistics.queuedReads = reads.queued
        statistics.readBatches = reads.transactions.load(ordering: .relaxed)
        statistics.batchedReads = reads.statements.load(ordering: .relaxed)
        statistics.readsRunAlone = reads.ranAlone.load(ordering: .relaxed)
        return statistics
    }

    /// Runs `body` with a connection taken from the pool and returned afterwards, counted for `tenant` (nil: none's;
    /// ``Configuration/tenantShare``).
    @discardableResult
    public func withConnection<T: Sendable>(tenant: String? = nil, _ body: (PostgresConnection) async throws -> T)
        async throws -> T
    {
        let connection = try await acquire(tenant: tenant)
        do {
            let value = try await body(connection)
            release(connection, tenant: tenant)
            return value
        } catch {
            release(connection, tenant: tenant)
            throw error
        }
    }

    /// Runs `body` inside `BEGIN … COMMIT`; any error rolls back.
    @discardableResult
    public func withTransaction<T: Sendable>(tenant: String? = nil, _ body: (PostgresConnection) async throws -> T)
        async throws -> T
    {
        try await withConnection(tenant: tenant) { connection in
            await connection.begin()
            do {
                let value = try await body(connection)
                try await connection.commit()
                return value
            } catch {
                try? await connection.rollback()
                throw error
            }
        }
    }

    /// Runs one statement on any connection.
    @discardableResult
    public func query(_ query: PostgresQuery, tenant: String? = nil) async throws -> PostgresRows {
        try await withConnection(tenant: tenant) { try await $0.query(query) }
    }

    /// Runs one statement that writes in a transaction of its own, possibly together with concurrent ones
    /// (``GroupCommitter``): answered after its commit. Statements of one transaction run in `key` order (same-key
    /// ones in arrival order); use the key of the row the statement locks first. A statement that fails fails alone.
    /// `tenant` is counted when the statement runs on a connection of its own (after a lock wait, or unbatched).
    @discardableResult
    public func groupCommitted(_ query: PostgresQuery, key: String, tenant: String? = nil) async throws -> PostgresRows {
        if configuration.groupCommitBatch == 1 { return try await self.query(query, tenant: tenant) }
        return try await committer.run(query, key: key, tenant: tenant, on: self)
    }

    /// Runs one read, possibly in one round trip with concurrent ones: the statements of a batch go out back to back
    /// on one connection, each a transaction of its own (a Sync after each), so a connection is taken once for all of
    /// them and PostgreSQL reads them as they come (measured on the auth-token route at c=64: PostgreSQL's CPU a
    /// request 33 -> 13 µs, the service's 84 -> 49 µs; docs/benchmarks.md). A lone read runs at once; one that waits
    /// ``Configuration/readQueueLimit`` for a batch runs alone. A read that fails fails alone, and none runs again.
    /// For point look-ups of at most a row, statements that take no row lock and return in a moment: a batch is
    /// answered when its last read is. Each statement takes its own snapshot, so it sees every write acknowledged
    /// before it was called.
    @discardableResult
    public func batchedRead(_ query: PostgresQuery, tenant: String? = nil) async throws -> PostgresRows {
        if configuration.readBatch == 1 { return try await self.query(query, tenant: tenant) }
        return try await reads.run(query, key: "", tenant: tenant, on: self)
    }

    /// Closes the pool: idle connections close now, waiters and later callers fail, connections in use close when
    /// they come back. Used at shutdown.
    public func close() {
        let (idle, waiters) = state.withLock { s -> ([PostgresConnection], [Resumption]) in
            let (idle, actions) = s.machine.close()
            return (idle, actions.compactMap { s.take($0) })
        }
        _ = idle  // dropped here: each connection closes itself (PQfinish) when released
        for (continuation, result) in waiters { continuation.resume(with: result) }
    }

    // MARK: - Acquire and release

    private func acquire(tenant: String?) async throws -> PostgresConnection {
        // A caller on an event loop prefers a connection of that loop: its statements then need no thread hop. Next
        // comes one opened before the loops were attached (it has a thread of its own): taken once, it is replaced
        // by one on a loop when it comes back, where left idle it would stay off the loops for good.
        let home = loops.current.map { ObjectIdentifier($0) }
        let (id, fast) = state.withLock { s -> (UInt64, Machine.AcquireAction?) in
            s.nextID += 1
            // Answer at once when no waiting is needed; otherwise wait below, where the continuation exists.
            let mustWait =
                !s.machine.isClosed
                && (s.machine.idleCount == 0 && s.machine.total >= s.machine.maxConnections
                    || s.machine.holdsShare(tenant))
            return (
                s.nextID,
                mustWait
                    ? nil
                    : s.machine.acquire(s.nextID, tenant: tenant, at: .now) {
                        home == nil || $0.loop == nil || $0.loop.map { ObjectIdentifier($0) } == home
                    }
            )
        }
        let grant: Grant
        switch fast {
        case let .lease(connection)?: return connection
        case .open?: return try await open(tenant: tenant)
        case let .fail(error)?: throw error
        case .cancelled?: throw CancellationError()
        case .wait?, nil:
            grant = try await wait(id, tenant: tenant)
            state.withLock { $0.machine.served(id) }
        }
        switch grant {
        case let .connection(connection): return connection
        case .slot: return try await open(tenant: tenant)
        }
    }

    /// Waits for a release, a slot, the time-out, a cancellation or the pool's close, whichever comes first.
    private func wait(_ id: UInt64, tenant: String?) async throws -> Grant {
        let timeout = configuration.acquireTimeout
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Grant, any Error>) in
                // Deciding and registering happen under one lock: no release can slip in between.
                let action = state.withLock { s -> Machine.AcquireAction in
                    let action = s.machine.acquire(id, tenant: tenant, at: .now)
                    if case .wait = action {
                        s.continuations[id] = continuation
                        s.deadlines[id] = .now + timeout
                        if !s.reaperRunning {
                            s.reaperRunning = true
                            Task { [weak self] in await self?.reap() }
                        }
                    }
                    return action
                }
                switch action {
                case let .lease(connection): continuation.resume(returning: .connection(connection))
                case .open: continuation.resume(returning: .slot)
                case let .fail(error): continuation.resume(throwing: error)
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .wait: break
                }
            }
        } onCancel: {
            let waiter = state.withLock { s -> Resumption? in
                guard s.machine.cancelled(id) else { return nil }
                s.deadlines[id] = nil
                return s.continuations.removeValue(forKey: id).map { ($0, .failure(CancellationError())) }
            }
            if let (continuation, result) = waiter { continuation.resume(with: result) }
        }
    }

    /// Fails the waiters whose time ran out, sleeping until the next deadline; ends when no one waits.
    private func reap() async {
        while true {
            let (expired, next) = state.withLock { s -> ([Resumption], ContinuousClock.Instant?) in
                let now = ContinuousClock.now
                var expired: [Resumption] = []
                for (id, deadline) in s.deadlines where deadline <= now {
                    s.deadlines[id] = nil
                    if s.machine.timedOut(id), let continuation = s.continuations.removeValue(forKey: id) {
                        expired.append((continuation, .failure(Machine.timeoutError)))
                    }
                }
                let next = s.deadlines.values.min()
                if next == nil { s.reaperRunning = false }
                return (expired, next)
            }
            for (continuation, result) in expired { continuation.resume(with: result) }
            guard let next else { return }
            try? await Task.sleep(until: next, clock: .continuous)
        }
    }

    /// Opens a connection for a slot the machine reserved; a failure gives the slot back and fails the waiters.
    private func open(tenant: String?) async throws -> PostgresConnection {
        do {
            let connection = try await PostgresConnection.connect(
                configuration.conninfo, on: loops.placement(), settings: configuration.session)
            state.withLock { $0.machine.opened() }
            return connection
        } catch {
            let error = PostgresError.from(error)
            let failed = state.withLock { s in
                s.machine.openFailed(error, tenant: tenant, at: .now).compactMap { s.take($0) }
            }
            for (continuation, result) in failed { continuation.resume(with: result) }
            throw error
        }
    }

    private func release(_ connection: PostgresConnection, tenant: String?) {
        let returned = Machine.Returned(
            healthy: connection.isHealthy, inTransaction: connection.isInTransaction, onLoop: connection.loop != nil,
            loopsAttached: !loops.isEmpty)
        let handOff = state.withLock { s in
            s.machine.release(connection, returned, tenant: tenant, at: .now).flatMap { s.take($0) }
        }
        if let (continuation, result) = handOff { continuation.resume(with: result) }
    }
}

extension Duration {
    /// Whole milliseconds, at least 1: what PostgreSQL's time-out settings take.
    var postgresMillis: Int {
        let (seconds, attoseconds) = components
        return Int(max(1, seconds * 1000 + attoseconds / 1_000_000_000_000_000))
    }
}
