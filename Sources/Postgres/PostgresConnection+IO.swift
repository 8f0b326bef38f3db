import CLibPQ
import Glibc

/// The non-blocking protocol work: sending, flushing, waiting on the socket and reading results in order.
extension PostgresConnection {
    /// What one sent command was: a statement's `Parse` (its SQL, to forget it if it fails), the transaction prelude
    /// sent before a statement that runs in a transaction of its own, a statement's execution, or a `Sync` that ends
    /// a transaction of its own.
    private enum Step {
        case prepare(sql: String)
        case prelude
        case execute(index: Int)
        case sync
    }

    /// `invalid_sql_statement_name`: an execution by a name no Parse made.
    static let undefinedStatement = "26000"

    /// The outcome of a statement that did not run because an earlier one in its pipeline failed.
    static let notRun = PostgresError(
        .server, sqlState: "25P02", message: "not run: an earlier statement of the same pipeline failed")

    /// Sends `queries` in pipeline mode and reads their outcomes. Together (the default), one `Sync` ends them:
    /// they are one implicit transaction, sent in one write. `separately`, each is followed by its own `Sync` (and
    /// preceded by the transaction prelude, through a pooler): each is a transaction of its own, whose failure touches
    /// no other, and each lets go of its locks when it ends; libpq 15 flushes at each `Sync`, so they go out one send
    /// each, back to back, with no round trip between them.
    func runPipeline(_ queries: [PostgresQuery], separately: Bool = false, prelude: PostgresQuery? = nil) async throws
        -> [Result<PostgresRows, PostgresError>]
    {
        guard PQenterPipelineMode(connection) == 1 else { throw lost() }
        var steps: [Step] = []
        steps.reserveCapacity(separately ? queries.count * 3 : queries.count + 1)
        for (index, query) in queries.enumerated() {
            if separately, let prelude {
                guard PQsendQueryParams(connection, prelude.sql, 0, nil, nil, nil, nil, 0) == 1 else { throw lost() }
                steps.append(.prelude)
            }
            try send(query, index: index, steps: &steps)
            if separately {
                guard PQpipelineSync(connection) == 1 else { throw lost() }
                steps.append(.sync)
            }
        }
        if !separately {
            guard PQpipelineSync(connection) == 1 else { throw lost() }
            steps.append(.sync)
        }
        try await flush()

        var outcomes = [Result<PostgresRows, PostgresError>](repeating: .failure(Self.notRun), count: queries.count)
        // An error before a statement's execution (its Parse, its prelude) is what that statement answers.
        var failedBefore: PostgresError?
        // Parses that failed, by SQL: separately, a later statement of the same SQL runs in a transaction of its own
        // by the name that Parse never made, and answers that Parse's error, not "prepared statement does not exist".
        var failedParses: [String: PostgresError] = [:]
        for step in steps {
            if case .sync = step {
                guard let sync = try await nextResult() else { throw lost() }
                let synced = PQresultStatus(sync) == PGRES_PIPELINE_SYNC
                PQclear(sync)
                guard synced else { throw lost() }
                failedBefore = nil
                continue
            }
            var outcome: Result<PostgresRows, PostgresError>?
            while let result = try await nextResult() {
                defer { PQclear(result) }
                switch PQresultStatus(result) {
                case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
                    if outcome == nil, case .execute = step { outcome = .success(rows(of: result)) }
                case PGRES_PIPELINE_ABORTED:
                    if outcome == nil { outcome = .failure(failedBefore ?? Self.notRun) }
                case PGRES_PIPELINE_SYNC:
                    // A sync before every command answered: the stream is out of step with what was sent.
                    retire()
                    throw PostgresError(.connectionFailed, message: "the pipeline ended early")
                default:
                    outcome = .failure(serverError(result))
                }
            }
            switch step {
            case let .prepare(sql):
                if case let .failure(error) = outcome {
                    prepared[sql] = nil
                    failedBefore = error
                    failedParses[sql] = error
                }
            case .prelude:
                if case let .failure(error) = outcome { failedBefore = error }
            case let .execute(index):
                if case let .failure(error) = outcome, error.sqlState == Self.undefinedStatement,
                    let parse = failedParses[queries[index].sql]
                {
                    outcome = .failure(parse)
                }
                outcomes[index] = outcome ?? .failure(Self.notRun)
                failedBefore = nil
            case .sync: break
            }
        }
        guard PQexitPipelineMode(connection) == 1 else { throw lost() }
        updateStatus()
        return outcomes
    }

    /// Queues one statement's commands: by name when it is prepared (its `Parse` first, the first time), else
    /// unnamed with its text.
    private func send(_ query: PostgresQuery, index: Int, steps: inout [Step]) throws {
        guard query.isPrepared, !settings.transactionPooled else {
            let sent = withCStrings(query.binds) { pointers in
                PQsendQueryParams(connection, query.sql, Int32(pointers.count), nil, pointers, nil, nil, 0)
            }
            guard sent == 1 else { throw lost() }
            steps.append(.execute(index: index))
            return
        }
        let name: String
        if let existing = prepared[query.sql] {
            name = existing
        } else {
            statementCount += 1
            name = "s\(statementCount)"
            guard PQsendPrepare(connection, name, query.sql, Int32(query.binds.count), nil) == 1 else {
                throw lost()
            }
            prepared[query.sql] = name
            steps.append(.prepare(sql: query.sql))
        }
        let sent = withCStrings(query.binds) { pointers in
            PQsendQueryPrepared(connection, name, Int32(pointers.count), pointers, nil, nil, 0)
        }
        guard sent == 1 else { throw lost() }
        steps.append(.execute(index: index))
    }

    /// Sends SQL text by the simple protocol (several statements allowed, no parameters) and reads every result.
    func runSimple(_ sql: String) async throws {
        guard PQsendQuery(connection, sql) == 1 else { throw lost() }
        try await flush()
        var firstError: PostgresError?
        while let result = try await nextResult() {
            defer { PQclear(result) }
            switch PQresultStatus(result) {
            case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY: break
            default: if firstError == nil { firstError = serverError(result) }
            }
        }
        updateStatus()
        if let firstError { throw firstError }
    }

    // MARK: - Socket

    /// Writes libpq's output buffer out, reading meanwhile so a server that answers early cannot deadlock it.
    private func flush() async throws {
        while true {
            let pending = PQflush(connection)
            if pending == 0 { return }
            if pending < 0 { throw lost() }
            await wait(writable: true)
            guard PQconsumeInput(connection) == 1 else { throw lost() }
        }
    }

    /// The next result, waiting for the socket while it would block; nil ends a command's results.
    private func nextResult() async throws -> OpaquePointer? {
        while PQisBusy(connection) == 1 {
            await wait(writable: false)
            guard PQconsumeInput(connection) == 1 else { throw lost() }
        }
        return PQgetResult(connection)
    }

    private func wait(writable: Bool) async {
        switch driver {
        case let .loop(loop):
            let fd = socket
            await withCheckedContinuation { continuation in
                loop.whenReady(fd, writable: writable) { continuation.resume() }
            }
        case .thread:
            // The connection's own serial queue: blocking here holds up nobody else.
            var descriptor = pollfd(
                fd: socket, events: Int16(POLLIN) | (writable ? Int16(POLLOUT) : 0), revents: 0)
            while poll(&descriptor, 1, -1) < 0 && errno == EINTR {}
        }
    }

    // MARK: - Errors and rows

    /// The connection broke (or libpq refused to send): it is retired, and the error says why.
    private func lost() -> PostgresError {
        retire()
        let message = String(cString: PQerrorMessage(connection)).trimmingTrailingNewlines()
        return PostgresError(.connectionFailed, message: message.isEmpty ? "the connection was lost" : message)
    }

    /// A failed result as an error. The server sends a SQLSTATE with every error; one without is libpq's own (the
    /// connection broke, e.g. "server closed the connection unexpectedly", whatever `PQstatus` says yet).
    private func serverError(_ result: OpaquePointer) -> PostgresError {
        let sqlState = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
        let message = String(cString: PQresultErrorMessage(result)).trimmingTrailingNewlines()
        if PQstatus(connection) != CONNECTION_OK || sqlState == nil {
            retire()
            return PostgresError(.connectionFailed, sqlState: sqlState, message: message)
        }
        // The server stopped taking writes (demoted by a failover): never reuse this connection.
        if sqlState == PostgresError.readOnlySQLTransaction { retire() }
        return PostgresError(.server, sqlState: sqlState, message: message)
    }

    /// The column names of `result`. A connection runs the same few statements again and again: the names of a
    /// recent result with the same columns are shared (compared in place), not made anew for every result.
    private func columnNames(of result: OpaquePointer, count: Int) -> [String] {
        candidates: for cached in recentColumns where cached.count == count {
            for (c, name) in cached.enumerated() {
                guard let fname = PQfname(result, Int32(c)), name.withCString({ strcmp($0, fname) }) == 0 else {
                    continue candidates
                }
            }
            return cached
        }
        var columns: [String] = []
        columns.reserveCapacity(count)
        for c in 0..<count { columns.append(String(cString: PQfname(result, Int32(c)))) }
        if count > 0 {
            if recentColumns.count == 16 { recentColumns.removeFirst() }
            recentColumns.append(columns)
        }
        return columns
    }

    private func rows(of result: OpaquePointer) -> PostgresRows {
        let columnCount = Int(PQnfields(result))
        let rowCount = Int(PQntuples(result))
        let columns = columnNames(of: result, count: columnCount)
        var cells: [String?] = []
        cells.reserveCapacity(rowCount * columnCount)
        for r in 0..<rowCount {
            for c in 0..<columnCount {
                if PQgetisnull(result, Int32(r), Int32(c)) == 1 {
                    cells.append(nil)
                } else {
                    // The length is known: no scan for the terminator, and the bytes are validated once.
                    let length = Int(PQgetlength(result, Int32(r), Int32(c)))
                    let bytes = UnsafeRawPointer(PQgetvalue(result, Int32(r), Int32(c))!)
                    cells.append(String(decoding: UnsafeRawBufferPointer(start: bytes, count: length), as: UTF8.self))
                }
            }
        }
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        return PostgresRows(columns: columns, cells: cells, count: rowCount, affectedRows: affected)
    }
}

/// Calls `body` with C string pointers for `strings` (nil for NULL), valid for the duration of the call.
/// All the strings share one buffer, each followed by its NUL: at most two allocations a statement (a small buffer is
/// on the stack), not one a parameter. No string here holds a NUL of its own (``PostgresConnection/pipeline(_:)``
/// refuses those before sending), so what libpq reads is the whole value.
private func withCStrings<R>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    var size = 0
    for string in strings { size += (string?.utf8.count ?? 0) + 1 }
    return withUnsafeTemporaryAllocation(of: CChar.self, capacity: max(size, 1)) { buffer in
        var pointers: [UnsafePointer<CChar>?] = []
        pointers.reserveCapacity(strings.count)
        var offset = 0
        for string in strings {
            guard var string else {
                pointers.append(nil)
                continue
            }
            let start = buffer.baseAddress! + offset
            offset += string.withUTF8 { utf8 in
                if let bytes = utf8.baseAddress {
                    UnsafeMutableRawPointer(start).copyMemory(from: bytes, byteCount: utf8.count)
                }
                return utf8.count
            }
            buffer[offset] = 0
            offset += 1
            pointers.append(UnsafePointer(start))
        }
        return body(pointers)
    }
}

/// Whether `value` holds a NUL byte (which libpq would cut the parameter at): one `memchr` over its UTF-8, not a
/// byte-by-byte walk of the view (1.3 % of a refresh callback's CPU was that walk over its 25 parameters).
func holdsNUL(_ value: String) -> Bool {
    var value = value
    return value.withUTF8 { utf8 in utf8.baseAddress.map { memchr($0, 0, utf8.count) != nil } ?? false }
}

/// Whether any of `query`'s parameters holds a NUL byte (``holdsNUL(_:)``).
func bindsNUL(_ query: PostgresQuery) -> Bool { query.binds.contains { $0.map(holdsNUL) == true } }
