import CLibPQ
import Dispatch
import Glibc
import Synchronization

/// One libpq connection in non-blocking mode, owned by an actor.
///
/// The actor's executor is the event loop the connection was placed on (``PostgresEventLoop``): a statement is
/// written to the socket, the loop's epoll says when its answer arrived, and the caller resumes on that loop, with
/// no thread hop when it runs there too. A connection placed on no loop (the CLI, migrations, tests of this module)
/// runs on a serial queue of its own and waits with `poll(2)`.
///
/// Statements are prepared once per connection (keyed by their SQL text) and executed with bound text parameters,
/// so no value is ever spliced into SQL. They are sent in pipeline mode: a first use's `Parse` travels with its
/// `Execute`, and ``pipeline(_:)`` sends many statements in one round trip. Behind a pooler in transaction mode
/// (``SessionSettings/transactionPooled``) nothing is kept on the session: statements go unnamed and the settings
/// travel with each transaction.
public actor PostgresConnection {
    /// What the connection sets on its server session, and whether it may keep anything there.
    public struct SessionSettings: Sendable, Hashable {
        /// `statement_timeout` in milliseconds; nil keeps the server's.
        public var statementTimeoutMillis: Int?
        /// True when the connection goes through a pooler in transaction mode (pgbouncer's `pool_mode =
        /// transaction`): each transaction may run on another server connection, so no statement is prepared by
        /// name (pgbouncer 1.18 would send its `Execute` to a server that never saw its `Parse`) and the settings
        /// are set in every transaction (`set_config(…, true)`, sent with its first statement) instead of once.
        public var transactionPooled: Bool

        public init(statementTimeoutMillis: Int? = nil, transactionPooled: Bool = false) {
            self.statementTimeoutMillis = statementTimeoutMillis
            self.transactionPooled = transactionPooled
        }

        /// Run once on connecting. `TimeZone` is one of the parameters a pooler replays on every server connection
        /// it hands over (pgbouncer tracks it from the server's `ParameterStatus`), so it is set here in both modes;
        /// the others only without a pooler, where they would stay on a server connection other clients share.
        var onConnect: String {
            guard !transactionPooled else { return "SET TimeZone = 'UTC'" }
            var sql = "SET TimeZone = 'UTC'; SET client_min_messages = warning"
            if let statementTimeoutMillis { sql += "; SET statement_timeout = \(statementTimeoutMillis)" }
            return sql
        }

        /// Sent at the start of every transaction when pooled: the session settings a pooler does not replay.
        var transactionPrelude: PostgresQuery? {
            guard transactionPooled else { return nil }
            var sql = "SELECT set_config('client_min_messages', 'warning', true)"
            if let statementTimeoutMillis {
                sql += ", set_config('statement_timeout', '\(statementTimeoutMillis)', true)"
            }
            return PostgresQuery(unsafeSQL: sql)
        }
    }

    enum Driver {
        case loop(any PostgresEventLoop)
        case thread(DispatchQueueExecutor)
    }

    let connection: OpaquePointer
    /// A duplicate of libpq's socket, owned here: it is what the loop watches. libpq closes its own descriptor when
    /// the connection breaks, and that number may then be reused (by an accepted HTTP client) before this connection
    /// is released; the duplicate keeps the number, and the epoll registration, this connection's until ``deinit``.
    let socket: Int32
    let driver: Driver
    let settings: SessionSettings
    /// ``SessionSettings/transactionPrelude``, built once.
    private let prelude: PostgresQuery?
    var prepared: [String: String] = [:]
    /// Names statements: never reused, even for one whose `Parse` failed.
    var statementCount = 0
    /// Column names of recent results, shared by the results with the same columns (``columnNames(of:count:)``).
    var recentColumns: [[String]] = []
    /// Set by ``begin()``: `BEGIN` travels with the next statement instead of costing a round trip of its own.
    private var beginPending = false
    /// One operation at a time: later callers wait their turn here (the actor is re-entered at every await).
    private var busy = false
    private var turnWaiters: [CheckedContinuation<Void, Never>] = []
    /// Health and transaction state after the last call, readable without hopping onto the connection's executor
    /// (the pool checks it on every release).
    private let status = Mutex(Status(healthy: true, inTransaction: false))

    struct Status {
        var healthy: Bool
        var inTransaction: Bool
        /// Set once the server refused a write as read-only, or the connection broke: it stays unhealthy.
        var retired = false
    }

    public nonisolated var unownedExecutor: UnownedSerialExecutor {
        switch driver {
        case let .loop(loop): loop.serialExecutor
        case let .thread(executor): executor.asUnownedSerialExecutor()
        }
    }

    /// The loop this connection runs on; nil when it has a thread of its own.
    public nonisolated var loop: (any PostgresEventLoop)? {
        if case let .loop(loop) = driver { return loop }
        return nil
    }

    private init(connection: OpaquePointer, socket: Int32, driver: Driver, settings: SessionSettings) {
        self.connection = connection
        self.socket = socket
        self.driver = driver
        self.settings = settings
        self.prelude = settings.transactionPrelude
    }

    isolated deinit {
        if case let .loop(loop) = driver { loop.forget(socket) }
        PQfinish(connection)
        close(socket)
    }

    /// Runs `sql` (statements that return no rows) on a connection not yet in non-blocking mode; true when it
    /// succeeded.
    private static func applies(_ sql: String, on conn: OpaquePointer) -> Bool {
        let result = PQexec(conn, sql)
        defer { PQclear(result) }
        return PQresultStatus(result) == PGRES_COMMAND_OK
    }

    /// Opens a connection from a libpq connection string or URL (on a thread of its own: connecting blocks) and
    /// places it on `loop`, or on a serial queue of its own when `loop` is nil.
    ///
    /// - Throws: ``PostgresError`` `.connectionFailed` with libpq's message.
    public static func connect(
        _ conninfo: String, on loop: (any PostgresEventLoop)? = nil, settings: SessionSettings = .init()
    ) async throws -> PostgresConnection {
        let onConnect = settings.onConnect
        let result: Result<OpaquePointer, PostgresError> = await withCheckedContinuation { continuation in
            // A queue of its own, not the global one: connecting blocks for as long as the server takes (up to
            // `connect_timeout`), and blocked global-queue threads delay every Task.sleep of the process (docs/security.md,
            // class 16).
            DispatchQueue(label: "postgres.connect").async {
                guard let conn = PQconnectdb(conninfo) else {
                    continuation.resume(returning: .failure(PostgresError(.connectionFailed, message: "out of memory")))
                    return
                }
                // Connected, its settings applied (one the server refuses, a statement timeout say, fails the
                // connection: running on without it would run without the bound it sets), and non-blocking.
                guard PQstatus(conn) == CONNECTION_OK, Self.applies(onConnect, on: conn), PQsetnonblocking(conn, 1) == 0
                else {
                    let message = String(cString: PQerrorMessage(conn)).trimmingTrailingNewlines()
                    PQfinish(conn)
                    continuation.resume(returning: .failure(PostgresError(.connectionFailed, message: message)))
                    return
                }
                continuation.resume(returning: .success(conn))
            }
        }
        let connection = try result.get()
        let socket = fcntl(PQsocket(connection), F_DUPFD_CLOEXEC, 0)
        guard socket >= 0 else {
            let reason = String(cString: strerror(errno))
            PQfinish(connection)
            throw PostgresError(.connectionFailed, message: "duplicating the connection's socket failed: \(reason)")
        }
        let driver: Driver = loop.map { .loop($0) } ?? .thread(DispatchQueueExecutor(label: "postgres.connection"))
        return PostgresConnection(connection: connection, socket: socket, driver: driver, settings: settings)
    }

    /// True while the connection is usable, as of its last call.
    public nonisolated var isHealthy: Bool { status.withLock { $0.healthy } }

    /// True when a transaction is left open, as of its last call.
    public nonisolated var isInTransaction: Bool { status.withLock { $0.inTransaction } }

    func updateStatus() {
        let healthy = PQstatus(connection) == CONNECTION_OK
        let inTransaction = PQtransactionStatus(connection) != PQTRANS_IDLE
        status.withLock {
            $0.healthy = healthy && !$0.retired
            $0.inTransaction = inTransaction
        }
    }

    /// Marks the connection as never to be reused.
    func retire() {
        status.withLock {
            $0.retired = true
            $0.healthy = false
        }
    }

    // MARK: - Statements

    /// Runs a parameterised statement, preparing it on first use (in the same round trip).
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresRows {
        try await pipeline([query])[0].get()
    }

    /// Sends `queries` in one round trip, in pipeline mode, and answers each statement's outcome in order.
    ///
    /// Outside a transaction the statements run as one implicit transaction, committed at the end: the first that
    /// fails rolls back those before it, and those after it answer an error without running. Inside a transaction
    /// (after `BEGIN`) they run in it, and the first failure aborts it.
    ///
    /// A parameter holding NUL is refused before anything is sent (the statement answers
    /// ``PostgresError/nulInParameter``, the others ``notRun``): libpq would cut it there, and the statement would run
    /// on another value than the caller's (`crm\0x` matching the row `crm`).
    public func pipeline(_ queries: [PostgresQuery]) async throws -> [Result<PostgresRows, PostgresError>] {
        if let bad = queries.firstIndex(where: bindsNUL) {
            return queries.indices.map { $0 == bad ? .failure(PostgresError.nulInParameter) : .failure(Self.notRun) }
        }
        await takeTurn()
        defer { giveTurn() }
        return try await pipelineInTurn(queries)
    }

    /// ``pipeline(_:)`` once the caller has its turn: `BEGIN` if one is pending, the pooler's prelude at the start of
    /// a transaction, then the statements.
    private func pipelineInTurn(_ queries: [PostgresQuery]) async throws -> [Result<PostgresRows, PostgresError>] {
        var head: [PostgresQuery] = []
        if beginPending {
            beginPending = false
            head.append("BEGIN")
        }
        if let prelude, !head.isEmpty || PQtransactionStatus(connection) == PQTRANS_IDLE { head.append(prelude) }
        guard !head.isEmpty else { return try await runPipeline(queries) }
        let outcomes = try await runPipeline(head + queries)
        for case let .failure(error) in outcomes.prefix(head.count) { return queries.map { _ in .failure(error) } }
        return Array(outcomes.dropFirst(head.count))
    }

    /// Sends `queries` back to back on the connection, each a transaction of its own (a `Sync` after each), and reads
    /// their answers as they come: a statement that fails fails alone, and the others run and answer as if sent one
    /// by one. Inside a transaction (after `BEGIN`) they run together in it instead, as ``pipeline(_:)`` runs them. A
    /// parameter holding NUL fails its own statement only. (libpq 15 flushes at each `Sync`: one send a statement, but
    /// no round trip between them.)
    public func pipelineSeparately(_ queries: [PostgresQuery]) async throws -> [Result<PostgresRows, PostgresError>] {
        let refused = queries.map(bindsNUL)
        var outcomes: [Result<PostgresRows, PostgresError>] = refused.map {
            .failure($0 ? PostgresError.nulInParameter : Self.notRun)
        }
        let sendable = queries.indices.filter { !refused[$0] }
        guard !sendable.isEmpty else { return outcomes }
        let statements = sendable.map { queries[$0] }
        await takeTurn()
        defer { giveTurn() }
        let results =
            beginPending || PQtransactionStatus(connection) != PQTRANS_IDLE
            ? try await pipelineInTurn(statements)
            : try await runPipeline(statements, separately: true, prelude: prelude)
        for (index, result) in zip(sendable, results) { outcomes[index] = result }
        return outcomes
    }

    /// Runs one or more statements without parameters (migrations, `BEGIN`, `COMMIT`).
    public func execute(_ sql: String) async throws {
        await takeTurn()
        defer { giveTurn() }
        if beginPending {
            beginPending = false
            try await runSimple("BEGIN; " + (prelude.map { $0.sql + "; " } ?? "") + sql)
        } else {
            try await runSimple(sql)
        }
    }

    /// Opens a transaction: `BEGIN` is sent with the transaction's first statement, in the same round trip.
    public func begin() { beginPending = true }

    /// Commits the transaction ``begin()`` opened (nothing to send when no statement ran in it).
    public func commit() async throws {
        if beginPending {
            beginPending = false
        } else {
            try await execute("COMMIT")
        }
    }

    /// Rolls the transaction ``begin()`` opened back.
    public func rollback() async throws {
        if beginPending {
            beginPending = false
        } else {
            try await execute("ROLLBACK")
        }
    }

    private func takeTurn() async {
        if !busy {
            busy = true
            return
        }
        await withCheckedContinuation { turnWaiters.append($0) }
    }

    /// Hands the turn straight to the next waiter (`busy` stays set), or frees it.
    private func giveTurn() {
        if turnWaiters.isEmpty {
            busy = false
        } else {
            turnWaiters.removeFirst().resume()
        }
    }
}

extension String {
    func trimmingTrailingNewlines() -> String {
        var s = Substring(self)
        while s.last == "\n" || s.last == " " { s.removeLast() }
        return String(s)
    }
}
