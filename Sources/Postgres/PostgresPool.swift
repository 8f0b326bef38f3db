import Foundation
import Synchronization

/// A bounded pool of connections with waiting, acquire time-outs and reconnect back-off.
///
/// A `final class` with its state behind a `Mutex` rather than an actor: taking and returning a connection are a
/// few instructions under a lock, not two executor hops per query. Only a caller that must wait suspends.
///
/// When the database is unreachable, the pool fails fast for a back-off window (100 ms doubling to 5 s)
/// instead of letting every request wait on a connect; the first success resets it.
public final class PostgresPool: Sendable {
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

    private enum Grant: Sendable {
        case connection(PostgresConnection)
        case slot
    }

    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Grant, any Error>
    }

    private struct State {
        var idle: [PostgresConnection] = []
        var total = 0
        var waiters: [Waiter] = []
        var nextWaiterID: UInt64 = 0
        var backoff: Duration = .zero
        var retryAfter: ContinuousClock.Instant?
        var lastError: PostgresError?
    }

    private enum Acquired {
        case ready(PostgresConnection)
        case open
        case wait(UInt64)
    }

    public let configuration: Configuration
    private let state = Mutex(State())

    public init(_ configuration: Configuration) { self.configuration = configuration }

    public var statistics: Statistics {
        state.withLock { Statistics(inUse: $0.total - $0.idle.count, idle: $0.idle.count, waiting: $0.waiters.count) }
    }

    /// Runs `body` with a connection taken from the pool and returned afterwards.
    @discardableResult
    public func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let connection = try await acquire()
        do {
            let value = try await body(connection)
            release(connection)
            return value
        } catch {
            release(connection)
            throw error
        }
    }

    /// Runs `body` inside `BEGIN … COMMIT`; any error rolls back.
    @discardableResult
    public func withTransaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
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
        state.withLock { s in
            s.total -= s.idle.count
            s.idle.removeAll()
        }
    }

    // MARK: - Acquire and release

    private func acquire() async throws -> PostgresConnection {
        let timeout = configuration.acquireTimeout
        let decision = state.withLock { s -> Acquired in
            if let connection = s.idle.popLast() { return .ready(connection) }
            if s.total < configuration.maxConnections {
                s.total += 1
                return .open
            }
            s.nextWaiterID += 1
            return .wait(s.nextWaiterID)
        }
        switch decision {
        case let .ready(connection): return connection
        case .open: return try await openForSlot()
        case let .wait(id):
            let grant: Grant = try await withCheckedThrowingContinuation { continuation in
                state.withLock { $0.waiters.append(Waiter(id: id, continuation: continuation)) }
                Task { [weak self] in
                    try? await Task.sleep(for: timeout)
                    self?.expireWaiter(id)
                }
            }
            switch grant {
            case let .connection(connection): return connection
            case .slot: return try await openForSlot()
            }
        }
    }

    private func expireWaiter(_ id: UInt64) {
        let waiter = state.withLock { s -> Waiter? in
            guard let index = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return s.waiters.remove(at: index)
        }
        waiter?.continuation.resume(
            throwing: PostgresError(.poolTimeout, message: "no database connection free in time"))
    }

    /// Opens a connection for a slot already counted in `total`; gives the slot back on failure.
    private func openForSlot() async throws -> PostgresConnection {
        let backingOff = state.withLock { s -> PostgresError? in
            guard let retryAfter = s.retryAfter, ContinuousClock.now < retryAfter else { return nil }
            return s.lastError ?? PostgresError(.connectionFailed, message: "database unavailable")
        }
        if let backingOff {
            giveBackSlot()
            throw backingOff
        }
        do {
            let connection = try await PostgresConnection.connect(configuration.conninfo)
            state.withLock { s in
                s.backoff = .zero
                s.retryAfter = nil
                s.lastError = nil
            }
            return connection
        } catch let error as PostgresError {
            // Waiters would only queue behind a dead database: let them fail now.
            let pending = state.withLock { s -> [Waiter] in
                s.total -= 1
                s.backoff = s.backoff == .zero ? .milliseconds(100) : min(s.backoff * 2, .seconds(5))
                s.retryAfter = ContinuousClock.now + s.backoff
                s.lastError = error
                defer { s.waiters.removeAll() }
                return s.waiters
            }
            for waiter in pending { waiter.continuation.resume(throwing: error) }
            throw error
        }
    }

    private func release(_ connection: PostgresConnection) {
        let reusable = connection.isHealthy && !connection.isInTransaction
        let handOff = state.withLock { s -> (Waiter, Grant)? in
            if reusable {
                if !s.waiters.isEmpty { return (s.waiters.removeFirst(), .connection(connection)) }
                s.idle.append(connection)
                return nil
            }
            s.total -= 1
            guard !s.waiters.isEmpty, s.total < configuration.maxConnections else { return nil }
            s.total += 1
            return (s.waiters.removeFirst(), .slot)
        }
        if let (waiter, grant) = handOff { waiter.continuation.resume(returning: grant) }
    }

    private func giveBackSlot() {
        let handOff = state.withLock { s -> Waiter? in
            s.total -= 1
            guard !s.waiters.isEmpty, s.total < configuration.maxConnections else { return nil }
            s.total += 1
            return s.waiters.removeFirst()
        }
        handOff?.continuation.resume(returning: .slot)
    }
}
