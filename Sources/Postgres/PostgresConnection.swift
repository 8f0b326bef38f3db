import CLibPQ
import Glibc
import Synchronization

/// One libpq connection, owned by an actor that runs on its own serial queue.
///
/// Statements are prepared once per connection (keyed by their SQL text) and executed with bound text
/// parameters, so no value is ever spliced into SQL.
public actor PostgresConnection {
    private let connection: OpaquePointer
    private let executor: DispatchQueueExecutor
    private var prepared: [String: String] = [:]
    /// Health and transaction state after the last call, readable without hopping onto the connection's queue
    /// (the pool checks it on every release).
    private let status = Mutex(Status(healthy: true, inTransaction: false))

    struct Status {
        var healthy: Bool
        var inTransaction: Bool
        /// Set once the server refused a write as read-only: the connection stays unhealthy whatever follows.
        var retired = false
    }

    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    private init(connection: OpaquePointer, executor: DispatchQueueExecutor) {
        self.connection = connection
        self.executor = executor
    }

    isolated deinit { PQfinish(connection) }

    /// Opens a connection from a libpq connection string or URL, off the cooperative pool.
    ///
    /// - Throws: ``PostgresError`` `.connectionFailed` with libpq's message.
    public static func connect(_ conninfo: String) async throws -> PostgresConnection {
        let executor = DispatchQueueExecutor(label: "postgres.connection")
        let result: Result<OpaquePointer, PostgresError> = await withCheckedContinuation { continuation in
            executor.queue.async {
                guard let conn = PQconnectdb(conninfo) else {
                    continuation.resume(returning: .failure(PostgresError(.connectionFailed, message: "out of memory")))
                    return
                }
                guard PQstatus(conn) == CONNECTION_OK else {
                    let message = String(cString: PQerrorMessage(conn)).trimmingTrailingNewlines()
                    PQfinish(conn)
                    continuation.resume(returning: .failure(PostgresError(.connectionFailed, message: message)))
                    return
                }
                let setup = PQexec(conn, "SET TimeZone = 'UTC'; SET client_min_messages = warning")
                PQclear(setup)
                continuation.resume(returning: .success(conn))
            }
        }
        return PostgresConnection(connection: try result.get(), executor: executor)
    }

    /// True while the connection is usable, as of its last call.
    public nonisolated var isHealthy: Bool { status.withLock { $0.healthy } }

    /// True when a transaction is left open, as of its last call.
    public nonisolated var isInTransaction: Bool { status.withLock { $0.inTransaction } }

    private func updateStatus() {
        let healthy = PQstatus(connection) == CONNECTION_OK
        let inTransaction = PQtransactionStatus(connection) != PQTRANS_IDLE
        status.withLock {
            $0.healthy = healthy && !$0.retired
            $0.inTransaction = inTransaction
        }
    }

    /// Runs a parameterised statement, preparing it on first use.
    @discardableResult
    public func query(_ query: PostgresQuery) throws -> PostgresRows {
        let name: String
        if let existing = prepared[query.sql] {
            name = existing
        } else {
            name = "s\(prepared.count + 1)"
            let result = PQprepare(connection, name, query.sql, Int32(query.binds.count), nil)
            defer { PQclear(result) }
            try check(result)
            prepared[query.sql] = name
        }
        let result = withCStrings(query.binds) { pointers in
            PQexecPrepared(connection, name, Int32(pointers.count), pointers, nil, nil, 0)
        }
        defer { PQclear(result) }
        try check(result)
        return rows(of: result!)
    }

    /// Runs one or more statements without parameters (migrations, `BEGIN`, `COMMIT`).
    public func execute(_ sql: String) throws {
        let result = PQexec(connection, sql)
        defer { PQclear(result) }
        try check(result)
    }

    private func check(_ result: OpaquePointer?) throws {
        updateStatus()
        guard let result else {
            throw PostgresError(
                .connectionFailed, message: String(cString: PQerrorMessage(connection)).trimmingTrailingNewlines())
        }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return
        default:
            let sqlState = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let message = String(cString: PQresultErrorMessage(result)).trimmingTrailingNewlines()
            // The server sends a SQLSTATE with every error; an error without one is libpq's own: the connection
            // broke (e.g. "server closed the connection unexpectedly" after a shutdown), whatever PQstatus says yet.
            if PQstatus(connection) != CONNECTION_OK || sqlState == nil {
                status.withLock {
                    $0.retired = true
                    $0.healthy = false
                }
                throw PostgresError(.connectionFailed, sqlState: sqlState, message: message)
            }
            if sqlState == PostgresError.readOnlySQLTransaction {
                // The server stopped taking writes (demoted by a failover): never reuse this connection.
                status.withLock {
                    $0.retired = true
                    $0.healthy = false
                }
            }
            throw PostgresError(.server, sqlState: sqlState, message: message)
        }
    }

    private func rows(of result: OpaquePointer) -> PostgresRows {
        let columnCount = Int(PQnfields(result))
        let rowCount = Int(PQntuples(result))
        var columns: [String] = []
        columns.reserveCapacity(columnCount)
        for c in 0..<columnCount { columns.append(String(cString: PQfname(result, Int32(c)))) }
        var values: [[String?]] = []
        values.reserveCapacity(rowCount)
        for r in 0..<rowCount {
            var row: [String?] = []
            row.reserveCapacity(columnCount)
            for c in 0..<columnCount {
                if PQgetisnull(result, Int32(r), Int32(c)) == 1 {
                    row.append(nil)
                } else {
                    row.append(String(cString: PQgetvalue(result, Int32(r), Int32(c))))
                }
            }
            values.append(row)
        }
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        return PostgresRows(columns: columns, values: values, affectedRows: affected)
    }
}

/// Calls `body` with C string pointers for `strings` (nil for NULL), valid for the duration of the call.
private func withCStrings<R>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    let storage: [UnsafeMutablePointer<CChar>?] = strings.map { $0.map { strdup($0) } ?? nil }
    defer { for p in storage { free(p) } }
    return body(storage.map { $0.map { UnsafePointer($0) } })
}

extension String {
    func trimmingTrailingNewlines() -> String {
        var s = Substring(self)
        while s.last == "\n" || s.last == " " { s.removeLast() }
        return String(s)
    }
}
