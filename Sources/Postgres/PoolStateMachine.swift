/// The connection pool's decisions, with no I/O: who gets a connection, who must open one, who waits, who fails.
/// ``PostgresPool`` calls it under one lock and carries out the action it returns, so a release can never slip in
/// between a caller deciding to wait and registering as a waiter (a lost wake-up).
///
/// Every waiter is identified by a number the caller picks before it asks; a cancellation or time-out that arrives
/// before the waiter is registered is remembered, so the request fails instead of waiting.
///
/// A caller may name its tenant (a project): a tenant holds at most ``tenantShare`` connections at once, leased or
/// being opened, and its callers beyond that wait apart (parked), never in front of another tenant's. So a tenant
/// whose transactions queue on its own row locks, each holding its connection until the lock or the statement
/// time-out, holds its share of the pool and not the rest: the others' callers are served as connections come back
/// (docs/security.md, class 27). Callers with no tenant (group commit's batches, the jobs) are not counted.
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
    /// The most connections one tenant holds at once.
    public let tenantShare: Int
    private(set) var idle: [Connection] = []
    /// Connections leased or being opened, plus idle ones.
    private(set) var total = 0
    /// Callers waiting to be served, in arrival order (their numbers increase).
    private(set) var waiters = WaiterQueue()
    /// The tenant of each waiter that named one.
    private var waiterTenants: [UInt64: String] = [:]
    /// Waiters whose tenant holds its share, by tenant, in arrival order: served only when the tenant gives one back.
    private var parked: [String: [UInt64]] = [:]
    /// Connections each tenant holds (leased or being opened); a tenant holding none is absent.
    private(set) var held: [String: Int] = [:]
    private var abandoned: Set<UInt64> = []
    private(set) var isClosed = false
    private var backoff: Duration = .zero
    private var retryAfter: ContinuousClock.Instant?
    private var lastError: PostgresError?

    public init(maxConnections: Int, tenantShare: Int? = nil) {
        self.maxConnections = max(1, maxConnections)
        self.tenantShare = max(1, min(tenantShare ?? self.maxConnections, self.maxConnections))
    }

    public var inUse: Int { total - idle.count }
    public var idleCount: Int { idle.count }
    public var waiting: Int { waiters.count + parked.values.reduce(0) { $0 + $1.count } }

    /// The connections `tenant` holds (leased or being opened).
    public func holding(_ tenant: String) -> Int { held[tenant, default: 0] }

    /// Whether `tenant` holds its share: its next caller waits, whatever is free.
    public func holdsShare(_ tenant: String?) -> Bool {
        guard let tenant else { return false }
        return held[tenant, default: 0] >= tenantShare
    }

    static var closedError: PostgresError { PostgresError(.connectionFailed, message: "the connection pool is closed") }
    static var timeoutError: PostgresError {
        PostgresError(.poolTimeout, message: "no database connection free in time")
    }

    /// A caller (`id`) asks for a connection at `now`. It gets an idle connection it `prefers` (one on its own event
    /// loop) if there is one, else a new one while there is room, else any idle one, else it waits.
    /// A tenant past its share waits, parked, whatever is free.
    public mutating func acquire(
        _ id: UInt64, tenant: String? = nil, at now: ContinuousClock.Instant,
        prefers: (Connection) -> Bool = { _ in true }
    ) -> AcquireAction {
        if abandoned.remove(id) != nil { return .cancelled }
        if isClosed { return .fail(Self.closedError) }
        if let tenant, holdsShare(tenant) {
            waiterTenants[id] = tenant
            parked[tenant, default: []].append(id)
            return .wait
        }
        if let index = idle.lastIndex(where: prefers) {
            take(for: tenant)
            return .lease(idle.remove(at: index))
        }
        let backingOff = retryAfter.map { now < $0 } ?? false
        if total < maxConnections && !backingOff {
            total += 1
            take(for: tenant)
            return .open
        }
        if let connection = idle.popLast() {
            take(for: tenant)
            return .lease(connection)
        }
        if total < maxConnections {
            return .fail(lastError ?? PostgresError(.connectionFailed, message: "database unavailable"))
        }
        if let tenant { waiterTenants[id] = tenant }
        waiters.append(id)
        return .wait
    }

    private mutating func take(for tenant: String?) {
        if let tenant { held[tenant, default: 0] += 1 }
    }

    /// `tenant` gives a connection back (or a slot it failed to open).
    private mutating func give(for tenant: String?) {
        guard let tenant, let count = held[tenant] else { return }
        held[tenant] = count > 1 ? count - 1 : nil
    }

    /// The first waiter, by arrival, that may be served now, taken out (and counted for its tenant). A waiter whose
    /// tenant came to hold its share while it waited is parked on the way. The parked callers of a tenant below its
    /// share compete by arrival too: few tenants have parked callers (only one that held its share parks them, and at
    /// most `maxConnections / tenantShare` hold theirs at once).
    private mutating func nextServable() -> UInt64? {
        while true {
            var best: (id: UInt64, tenant: String?)? = waiters.first.map { ($0, waiterTenants[$0]) }
            for (tenant, queue) in parked where !holdsShare(tenant) {
                if let head = queue.first, best.map({ head < $0.id }) ?? true { best = (head, tenant) }
            }
            guard let (id, tenant) = best else { return nil }
            if let tenant, holdsShare(tenant) {
                // The head of the queue, whose tenant holds its share now: parked (in place), then look again.
                waiters.removeFirst()
                let index = parked[tenant, default: []].insertionIndex(of: id)
                parked[tenant, default: []].insert(id, at: index)
                continue
            }
            if waiters.first == id {
                waiters.removeFirst()
            } else if let tenant {  // the head of the tenant's parked callers
                parked[tenant]!.removeFirst()
                if parked[tenant]!.isEmpty { parked[tenant] = nil }
            }
            waiterTenants[id] = nil
            take(for: tenant)
            return id
        }
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
        let tenant = waiterTenants.removeValue(forKey: id)
        if let index = waiters.firstIndex(of: id) {
            waiters.remove(at: index)
            return true
        }
        guard let tenant, let index = parked[tenant]?.firstIndex(of: id) else { return false }
        parked[tenant]!.remove(at: index)
        if parked[tenant]!.isEmpty { parked[tenant] = nil }
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
    public mutating func release(
        _ connection: Connection, _ returned: Returned, tenant: String? = nil, at now: ContinuousClock.Instant
    ) -> WaiterAction? {
        release(connection, reusable: returned.isReusable, tenant: tenant, at: now)
    }

    /// `tenant` is the one the connection was acquired for.
    public mutating func release(
        _ connection: Connection, reusable: Bool, tenant: String? = nil, at now: ContinuousClock.Instant
    ) -> WaiterAction? {
        give(for: tenant)
        if isClosed || !reusable {
            total -= 1
            if isClosed { return nil }
            // The tenant gave one back: a caller of it that was parked may take a connection left idle meanwhile (the
            // slot may not open while the database is backing off).
            if !idle.isEmpty, let waiter = nextServable() { return .lease(waiter: waiter, idle.removeLast()) }
            return grantSlot(at: now)
        }
        if let waiter = nextServable() { return .lease(waiter: waiter, connection) }
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
    public mutating func openFailed(_ error: PostgresError, tenant: String? = nil, at now: ContinuousClock.Instant)
        -> [WaiterAction]
    {
        total -= 1
        give(for: tenant)
        backoff = backoff == .zero ? .milliseconds(50) : min(backoff * 2, Self.maxBackoff)
        retryAfter = now + backoff
        lastError = error
        return removeAllWaiters().map { .fail(waiter: $0, error) }
    }

    /// Every waiter, parked ones too, taken out (in arrival order).
    private mutating func removeAllWaiters() -> [UInt64] {
        let all = (Array(waiters.all) + parked.values.joined()).sorted()
        waiters.removeAll()
        parked.removeAll()
        waiterTenants.removeAll()
        return all
    }

    /// A slot for the first waiter that may be served, when one is free and the database is not backing off.
    private mutating func grantSlot(at now: ContinuousClock.Instant) -> WaiterAction? {
        guard total < maxConnections else { return nil }
        if let retryAfter, now < retryAfter { return nil }
        guard let waiter = nextServable() else { return nil }
        total += 1
        return .open(waiter: waiter)
    }

    /// Closes the pool: the idle connections are handed back to be closed, every waiter fails, and so does every
    /// later acquire; connections in use are dropped when they come back.
    public mutating func close() -> (idle: [Connection], waiters: [WaiterAction]) {
        isClosed = true
        let connections = idle
        total -= idle.count
        idle = []
        return (connections, removeAllWaiters().map { .fail(waiter: $0, Self.closedError) })
    }
}

extension [UInt64] {
    /// Where `id` goes in this ascending array to keep it ascending (binary search).
    fileprivate func insertionIndex(of id: UInt64) -> Int {
        var (low, high) = (0, count)
        while low < high {
            let middle = (low + high) / 2
            if self[middle] < id { low = middle + 1 } else { high = middle }
        }
        return low
    }
}

/// The waiters in arrival order: taken from the front in constant time (a burst of thousands parked in one release
/// costs each a step, not a shift of the whole queue).
struct WaiterQueue {
    private var storage: [UInt64] = []
    private var head = 0

    var isEmpty: Bool { head == storage.count }
    var count: Int { storage.count - head }
    var first: UInt64? { isEmpty ? nil : storage[head] }
    var all: ArraySlice<UInt64> { storage[head...] }

    mutating func append(_ id: UInt64) { storage.append(id) }

    @discardableResult
    mutating func removeFirst() -> UInt64 {
        let id = storage[head]
        head += 1
        if head > 64 && head * 2 > storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return id
    }

    func firstIndex(of id: UInt64) -> Int? { storage[head...].firstIndex(of: id) }

    mutating func remove(at index: Int) { storage.remove(at: index) }

    mutating func removeAll() {
        storage.removeAll()
        head = 0
    }
}
