/// The connection pool's decisions, with no I/O: who gets a connection, who must open one, who waits, who fails.
/// ``PostgresPool`` calls it under one lock and carries out the action it returns, so a release can never slip in
/// between a caller deciding to wait and registering as a waiter (a lost wake-up).
///
/// Every waiter is identified by a number the caller picks before it asks; a cancellation or time-out that arrives
/// before the waiter is registered is remembered, so the request fails instead of waiting.
public struct PoolStateMachine<Connection> {
    public enum AcquireAction {
        /// Use this idle connection.
        case lease(Connection)
        /// A slot is reserved for the caller: open a connection, then report ``opened()`` or ``openFailed(_:at:)``.
        case open
        /// Registered as a waiter: a release, a time-out, a cancellation or ``close()`` will answer it.
        case wait
        case fail(PostgresError)
        /// The caller was cancelled before it asked.
        case cancelled
    }

    /// What to do for one waiter after a release or a failure.
    public enum WaiterAction {
        case lease(waiter: UInt64, Connection)
        /// A slot is reserved for the waiter: it opens a connection itself.
        case open(waiter: UInt64)
        case fail(waiter: UInt64, PostgresError)
    }

    public let maxConnections: Int
    private(set) var idle: [Connection] = []
    /// Connections leased or being opened, plus idle ones.
    private(set) var total = 0
    private(set) var waiters: [UInt64] = []
    private var abandoned: Set<UInt64> = []
    private(set) var isClosed = false
    private var backoff: Duration = .zero
    private var retryAfter: ContinuousClock.Instant?
    private var lastError: PostgresError?

    public init(maxConnections: Int) { self.maxConnections = max(1, maxConnections) }

    public var inUse: Int { total - idle.count }
    public var idleCount: Int { idle.count }
    public var waiting: Int { waiters.count }

    static var closedError: PostgresError { PostgresError(.connectionFailed, message: "the connection pool is closed") }
    static var timeoutError: PostgresError {
        PostgresError(.poolTimeout, message: "no database connection free in time")
    }

    /// A caller (`id`) asks for a connection at `now`. It gets an idle connection it `prefers` (one on its own event
    /// loop) if there is one, else a new one while there is room, else any idle one, else it waits.
    public mutating func acquire(
        _ id: UInt64, at now: ContinuousClock.Instant, prefers: (Connection) -> Bool = { _ in true }
    ) -> AcquireAction {
        if abandoned.remove(id) != nil { return .cancelled }
        if isClosed { return .fail(Self.closedError) }
        if let index = idle.lastIndex(where: prefers) { return .lease(idle.remove(at: index)) }
        let backingOff = retryAfter.map { now < $0 } ?? false
        if total < maxConnections && !backingOff {
            total += 1
            return .open
        }
        if let connection = idle.popLast() { return .lease(connection) }
        if total < maxConnections {
            return .fail(lastError ?? PostgresError(.connectionFailed, message: "database unavailable"))
        }
        waiters.append(id)
        return .wait
    }

    /// The caller's time ran out. True when it was still waiting (fail it with ``timeoutError``).
    public mutating func timedOut(_ id: UInt64) -> Bool { removeWaiter(id) }

    /// The caller was cancelled. True when it was waiting (fail it); a caller that has not asked yet will be
    /// answered ``AcquireAction/cancelled`` when it does.
    public mutating func cancelled(_ id: UInt64) -> Bool {
        if removeWaiter(id) { return true }
        abandoned.insert(id)
        return false
    }

    /// The caller that was answered ``AcquireAction/lease(_:)`` or got a connection from a waiter action is done
    /// asking (it won the race against its own cancellation): forget a cancellation noted for it.
    public mutating func served(_ id: UInt64) { abandoned.remove(id) }

    private mutating func removeWaiter(_ id: UInt64) -> Bool {
        guard let index = waiters.firstIndex(of: id) else { return false }
        waiters.remove(at: index)
        return true
    }

    /// A connection comes back. `reusable` is false when it broke or was left inside a transaction.
    /// What a released connection is like, for the machine to decide whether it goes back to the pool.
    public struct Returned: Sendable {
        public var healthy: Bool
        public var inTransaction: Bool
        /// Placed on an event loop (rather than a thread of its own).
        public var onLoop: Bool
        /// Loops are attached to the pool: a connection opened before they were has a thread of its own, and is
        /// replaced by one on a loop.
        public var loopsAttached: Bool

        public init(healthy: Bool, inTransaction: Bool, onLoop: Bool, loopsAttached: Bool) {
            self.healthy = healthy
            self.inTransaction = inTransaction
            self.onLoop = onLoop
            self.loopsAttached = loopsAttached
        }

        /// Healthy, out of any transaction, and on a loop when there are loops.
        public var isReusable: Bool { healthy && !inTransaction && (onLoop || !loopsAttached) }
    }

    /// A connection comes back; the machine decides whether it is kept (``Returned/isReusable``).
    public mutating func release(_ connection: Connection, _ returned: Returned, at now: ContinuousClock.Instant)
        -> WaiterAction?
    {
        release(connection, reusable: returned.isReusable, at: now)
    }

    public mutating func release(_ connection: Connection, reusable: Bool, at now: ContinuousClock.Instant)
        -> WaiterAction?
    {
        if isClosed || !reusable {
            total -= 1
            return isClosed ? nil : grantSlot(at: now)
        }
        if !waiters.isEmpty { return .lease(waiter: waiters.removeFirst(), connection) }
        idle.append(connection)
        return nil
    }

    /// A reserved slot opened its connection: the database is reachable again.
    public mutating func opened() {
        backoff = .zero
        retryAfter = nil
        lastError = nil
    }

    /// The longest wait between two connection attempts while the database is unreachable. Short, so a replica serves
    /// again well within a second of a failover's new primary accepting writes; one attempt per half second per
    /// replica costs a recovering server nothing.
    public static var maxBackoff: Duration { .milliseconds(500) }

    /// A reserved slot failed to open: back off (50 ms doubling to ``maxBackoff``) and fail every waiter now, rather
    /// than let them queue behind a database that is down.
    public mutating func openFailed(_ error: PostgresError, at now: ContinuousClock.Instant) -> [WaiterAction] {
        total -= 1
        backoff = backoff == .zero ? .milliseconds(50) : min(backoff * 2, Self.maxBackoff)
        retryAfter = now + backoff
        lastError = error
        defer { waiters.removeAll() }
        return waiters.map { .fail(waiter: $0, error) }
    }

    /// A slot for the first waiter, when one is free and the database is not backing off.
    private mutating func grantSlot(at now: ContinuousClock.Instant) -> WaiterAction? {
        guard !waiters.isEmpty, total < maxConnections else { return nil }
        if let retryAfter, now < retryAfter { return nil }
        total += 1
        return .open(waiter: waiters.removeFirst())
    }

    /// Closes the pool: the idle connections are handed back to be closed, every waiter fails, and so does every
    /// later acquire; connections in use are dropped when they come back.
    public mutating func close() -> (idle: [Connection], waiters: [WaiterAction]) {
        isClosed = true
        let connections = idle
        total -= idle.count
        idle = []
        defer { waiters.removeAll() }
        return (connections, waiters.map { .fail(waiter: $0, Self.closedError) })
    }
}
