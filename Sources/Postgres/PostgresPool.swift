import Foundation

/// A bounded pool of connections with waiting, acquire time-outs and reconnect back-off.
///
/// When the database is unreachable, the pool fails fast for a back-off window (100 ms doubling to 5 s)
/// instead of letting every request wait on a connect; the first success resets it.
public actor PostgresPool {
    public struct Configuration: Sendable {
        public var conninfo: String
        public var maxConnections: Int
        /// How long an acquire waits for a free connection before failing with `.poolTimeout`.
        public var acquireTimeout: Duration

        public init(conninfo: String, maxConnections: Int = 10, acquireTimeout: Duration = .seconds(5)) {
            self.conninfo = conninfo
            self.maxConnections = max(1, maxConnections)
            self.acquireTimeout = acquireTimeout
        }
    }

    /// Connections in use, idle and callers waiting, for metrics.
    public struct Statistics: Sendable {
        public let inUse: Int
        public let idle: Int
        public let waiting: Int
    }

    private enum Grant {
        case connection(PostgresConnection)
        case slot
    }

    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Grant, any Error>
    }

    public let configuration: Configuration
    private var idle: [PostgresConnection] = []
    private var total = 0
    private var waiters: [Waiter] = []
    private var nextWaiterID: UInt64 = 0
    private var backoff: Duration = .zero
    private var retryAfter: ContinuousClock.Instant?
    private var lastError: PostgresError?

    public init(_ configuration: Configuration) { self.configuration = configuration }

    public var statistics: Statistics {
        Statistics(inUse: total - idle.count, idle: idle.count, waiting: waiters.count)
    }

    /// Runs `body` with a connection taken from the pool and returned afterwards.
    @discardableResult
    public func withConnection<T: Sendable>(
        _ body: @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let connection = try await acquire()
        do {
            let value = try await body(connection)
            await release(connection)
            return value
        } catch {
            await release(connection)
            throw error
        }
    }

    /// Runs `body` inside `BEGIN … COMMIT`; any error rolls back.
    @discardableResult
    public func withTransaction<T: Sendable>(
        _ body: @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await withConnection { connection in
            try await connection.execute("BEGIN")
            do {
                let value = try await body(connection)
                try await connection.execute("COMMIT")
                return value
            } catch {
                try? await connection.execute("ROLLBACK")
                throw error
            }
        }
    }

    /// Runs one statement on any connection.
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresRows {
        try await withConnection { try await $0.query(query) }
    }

    /// Closes idle connections; used at shutdown.
    public func close() {
        total -= idle.count
        idle.removeAll()
    }

    // MARK: - Acquire and release

    private func acquire() async throws -> PostgresConnection {
        if let connection = idle.popLast() { return connection }
        if total < configuration.maxConnections {
            total += 1
            return try await openForSlot()
        }
        nextWaiterID += 1
        let id = nextWaiterID
        let timeout = configuration.acquireTimeout
        let grant: Grant = try await withCheckedThrowingContinuation { continuation in
            waiters.append(Waiter(id: id, continuation: continuation))
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                await self?.expireWaiter(id)
            }
        }
        switch grant {
        case let .connection(connection): return connection
        case .slot: return try await openForSlot()
        }
    }

    private func expireWaiter(_ id: UInt64) {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        let waiter = waiters.remove(at: index)
        waiter.continuation.resume(throwing: PostgresError(.poolTimeout, message: "no database connection free in time"))
    }

    /// Opens a connection for a slot already counted in `total`; gives the slot back on failure.
    private func openForSlot() async throws -> PostgresConnection {
        let now = ContinuousClock.now
        if let retryAfter, now < retryAfter {
            total -= 1
            handOffSlot()
            throw lastError ?? PostgresError(.connectionFailed, message: "database unavailable")
        }
        do {
            let connection = try await PostgresConnection.connect(configuration.conninfo)
            backoff = .zero
            retryAfter = nil
            lastError = nil
            return connection
        } catch let error as PostgresError {
            total -= 1
            backoff = backoff == .zero ? .milliseconds(100) : min(backoff * 2, .seconds(5))
            retryAfter = ContinuousClock.now + backoff
            lastError = error
            failWaiters(error)
            throw error
        }
    }

    private func release(_ connection: PostgresConnection) async {
        let healthy = await connection.isHealthy
        let clean = healthy ? !(await connection.isIdleInTransaction) : false
        if healthy && clean {
            if !waiters.isEmpty {
                waiters.removeFirst().continuation.resume(returning: .connection(connection))
            } else {
                idle.append(connection)
            }
        } else {
            total -= 1
            handOffSlot()
        }
    }

    private func handOffSlot() {
        guard !waiters.isEmpty, total < configuration.maxConnections else { return }
        total += 1
        waiters.removeFirst().continuation.resume(returning: .slot)
    }

    private func failWaiters(_ error: PostgresError) {
        // Waiters would only queue behind a dead database: let them fail now.
        let pending = waiters
        waiters.removeAll()
        for waiter in pending { waiter.continuation.resume(throwing: error) }
    }
}
