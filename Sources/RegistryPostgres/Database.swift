import Crypto
import Postgres
import Registry

/// The stores' handle on the pool. Every statement goes through here, so every failure of a statement (the database
/// down, a constraint, a timeout, a byte it cannot store) leaves this module as a ``RegistryError``
/// (``translate(_:)``). A row that does not decode afterwards (`PostgresRow.require`: the schema and the code
/// disagree, a bug and never a client's doing) still throws its `PostgresError`; the API answers it as any unexpected
/// error, 500 with the cause in the log. It also seals the secrets the stores keep (``seal(_:context:)``): none is
/// written in clear.
struct Database: Sendable {
    let pool: PostgresPool
    let box: SecretBox
    /// For a read replica's handle: the primary, where a read goes when the replica cannot be reached.
    var fallback: PostgresPool? = nil

    /// A secret as stored: sealed under the master key, bound to `context` (the row it belongs to).
    func seal(_ secret: String, context: String) throws -> String {
        do {
            return try box.seal(secret, context: context)
        } catch {
            throw RegistryError(.internal, "sealing a secret failed: \(error)")
        }
    }

    /// A stored secret in clear. One that does not open was written under another master key: that is a
    /// configuration error, and nothing is signed with a secret that cannot be read.
    func open(_ stored: String, context: String) throws -> String {
        do {
            return try box.openString(stored, context: context)
        } catch {
            throw RegistryError(
                .internal,
                "a stored secret (\(context)) does not open with this SECRETS_KEY; start with the key it was sealed with"
            )
        }
    }

    @discardableResult
    func query(_ query: PostgresQuery) async throws -> PostgresRows {
        try await Database.translating { try await failingOver { try await $0.query(query, tenant: Tenant.current) } }
    }

    /// Runs one statement that writes, possibly committed together with concurrent ones (group commit): `key` names
    /// the row it locks first, so statements of one transaction lock in one order. Never on a read replica.
    @discardableResult
    func groupCommitted(_ query: PostgresQuery, key: String) async throws -> PostgresRows {
        try await Database.translating {
            try await pool.groupCommitted(query, key: key, tenant: Tenant.current)
        }
    }

    /// Runs one point read (a look-up by key that takes no lock), possibly in one round trip with concurrent ones
    /// (``PostgresPool/batchedRead(_:)``); on a replica that cannot be reached, once more on the primary.
    func batchedRead(_ query: PostgresQuery) async throws -> PostgresRows {
        try await Database.translating {
            try await failingOver { try await $0.batchedRead(query, tenant: Tenant.current) }
        }
    }

    /// Runs `body` in one transaction (committed when it returns, rolled back when it throws).
    func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await Database.translating {
            try await failingOver { try await $0.withTransaction(tenant: Tenant.current, body) }
        }
    }

    /// Runs `body` on the pool; on a replica that cannot be reached (not one that refused a write: that is a bug to
    /// see, not to hide; nor one whose pool had no connection free in time: the project held its share there, and
    /// would then hold a share of the primary's too), once more on the primary.
    private func failingOver<T>(_ body: (PostgresPool) async throws -> T) async throws -> T {
        guard let fallback else { return try await body(pool) }
        do {
            return try await body(pool)
        } catch let error as PostgresError
            where error.isUnavailable && error.sqlState != PostgresError.readOnlySQLTransaction
                && error.code != .poolTimeout
        {
            return try await body(fallback)
        }
    }

    static func translating<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as PostgresError {
            throw translate(error)
        }
    }

    /// A database failure in the domain's terms. Only the first line of the server's message is kept: the lines
    /// after it (DETAIL) quote key values, which can be tokens.
    static func translate(_ error: PostgresError) -> RegistryError {
        if error.isUnavailable {
            return RegistryError(.unavailable, "the database is unavailable; retry later")
        }
        let summary = error.message.split(separator: "\n").first.map(String.init) ?? ""
        switch error.sqlState {
        case PostgresError.uniqueViolation?:
            return RegistryError(.alreadyExists, "the resource already exists")
        case PostgresError.foreignKeyViolation? where summary.contains("insert or update on table"):
            // What the write refers to (an installation, a check-in's) was deleted by a transaction that committed
            // while this one ran (a /register racing its installation's delete): gone, as a read after the delete
            // would find it, never a fault. (A delete refused for rows still referring to it is a fault: below.)
            return RegistryError(.notFound, "what this refers to no longer exists")
        case "RG001"?:  // registry_assert_fid_live: the FID was retired while the create waited
            return RegistryError(.alreadyExists, "the installation ID was deleted")
        case let state? where state.hasPrefix("40") || state == "55P03":
            // Transaction rollback (a serialization failure, a deadlock) or a lock not available: transient, so an
            // answer every client retries (503 with Retry-After), never the 409 that Android's FIS client and the
            // admin SDKs read as final.
            return .contended("a concurrent change got in the way; retry")
        case "57014"?:  // query_canceled: statement_timeout
            return .contended("the database did not answer in time; retry later")
        case "22021"?:  // NUL in a text value (refused by the binding layer before sending) or invalid UTF-8
            return RegistryError(.invalidArgument, "a text value holds NUL or bytes that are not UTF-8")
        case let state? where state.hasPrefix("22"):  // data exception: a value out of the column's range
            return RegistryError(.invalidArgument, "a value is out of range")
        case "54000"?:
            // program_limit_exceeded: a value too large for an index entry. Every indexed input has a limit that
            // fits (IndexedInputLimitTests holds each to it); this is the backstop, a client's value, not a fault.
            return RegistryError(.invalidArgument, "a value is too large to be stored")
        default:
            return RegistryError(.internal, "database error \(error.code) [\(error.sqlState ?? "-")]: \(summary)")
        }
    }
}

extension PostgresConnection {
    /// Refuses with `.resourceExhausted` (naming `field`) when `count` answers `limit` or more. Run it after taking
    /// the row lock that serialises the writers being counted, in the same transaction, so two cannot both pass.
    func requireRoom(_ count: PostgresQuery, limit: Int, field: String, _ message: String) async throws {
        let held: Int = try await query(count).first?.require("n") ?? 0
        guard held < limit else { throw RegistryError(.resourceExhausted, message, field: field) }
    }
}

extension PostgresRow {
    /// A column holding one of a closed vocabulary; a value outside it is a corrupt row, not a default.
    func require<Value: RawRepresentable>(_ column: String, as type: Value.Type) throws -> Value
    where Value.RawValue == String {
        let raw: String = try require(column)
        guard let value = Value(rawValue: raw) else {
            throw RegistryError(.internal, "column \(column) holds \(raw.prefix(32)), not a \(Value.self)")
        }
        return value
    }

    func decode<Value: RawRepresentable>(_ column: String, as type: Value.Type) throws -> Value?
    where Value.RawValue == String {
        guard try decode(column) as String? != nil else { return nil }
        return try require(column, as: type)
    }
}
