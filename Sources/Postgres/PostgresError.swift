/// An error from the database layer, carrying the SQLSTATE when the server sent one.
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The connection could not be opened or was lost.
        public static let connectionFailed = Code("connectionFailed")
        /// No connection became free in time.
        public static let poolTimeout = Code("poolTimeout")
        /// The server rejected a statement (see ``PostgresError/sqlState``).
        public static let server = Code("server")
        /// A column value could not be decoded to the requested type.
        public static let decoding = Code("decoding")
        public var description: String { name }
    }

    public let code: Code
    /// The five-character SQLSTATE, for ``Code/server`` errors.
    public let sqlState: String?
    public let message: String

    public init(_ code: Code, sqlState: String? = nil, message: String) {
        self.code = code
        self.sqlState = sqlState
        self.message = message
    }

    public var description: String {
        if let sqlState { return "\(code) [\(sqlState)]: \(message)" }
        return "\(code): \(message)"
    }

    /// True when the database is unreachable rather than the statement being wrong: callers answer 503.
    public var isUnavailable: Bool {
        code == .connectionFailed || code == .poolTimeout
            || sqlState.map {
                $0.hasPrefix("08") || $0.hasPrefix("57P") || $0 == "53300" || $0 == Self.readOnlySQLTransaction
            } == true
    }

    /// A write reached a server that only reads: a standby, or a primary demoted by a failover.
    public static let readOnlySQLTransaction = "25006"

    /// SQLSTATE 22021 (character_not_in_repertoire), what PostgreSQL answers for NUL in text, raised before sending.
    public static let nulInParameter = PostgresError(
        .server, sqlState: "22021", message: "a text parameter holds NUL, which PostgreSQL text cannot; not sent")

    public static let uniqueViolation = "23505"
    public static let foreignKeyViolation = "23503"
    public static let serializationFailure = "40001"
    public static let deadlockDetected = "40P01"
    /// `lock_timeout` ran out (or `NOWAIT` found the lock taken).
    public static let lockNotAvailable = "55P03"
}

extension PostgresError {
    /// `error` as a ``PostgresError``: itself, or a lost connection that names it.
    static func from(_ error: any Error) -> PostgresError {
        error as? PostgresError ?? PostgresError(.connectionFailed, message: "\(error)")
    }
}
