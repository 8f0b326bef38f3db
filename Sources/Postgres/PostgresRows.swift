/// The rows of a result, with values in PostgreSQL's text format.
public struct PostgresRows: Sendable, Sequence {
    public let columns: [String]
    public let values: [[String?]]
    /// Rows changed, for INSERT/UPDATE/DELETE.
    public let affectedRows: Int

    init(columns: [String], values: [[String?]], affectedRows: Int) {
        self.columns = columns
        self.values = values
        self.affectedRows = affectedRows
    }

    public var count: Int { values.count }
    public var isEmpty: Bool { values.isEmpty }
    public var first: PostgresRow? { values.first.map { PostgresRow(values: $0, columns: columns) } }

    public func makeIterator() -> AnyIterator<PostgresRow> {
        var iterator = values.makeIterator()
        let columns = self.columns
        return AnyIterator { iterator.next().map { PostgresRow(values: $0, columns: columns) } }
    }
}

/// One row; columns are read by name.
public struct PostgresRow: Sendable {
    @usableFromInline let values: [String?]
    /// The result's column names, shared by its rows. Searched in order, not hashed: a result has a handful of
    /// columns, and comparing short names costs less than hashing one (hashing was 4 % of a topic page's CPU).
    @usableFromInline let columns: [String]

    /// The column's value, or nil for NULL.
    ///
    /// - Throws: ``PostgresError`` `.decoding` when the column is missing or does not decode as `T`.
    /// Inlinable, so the stores' calls are specialised for their types: decoding runs once per column per row.
    @inlinable
    public func decode<T: PostgresDecodable>(_ column: String, as type: T.Type = T.self) throws -> T? {
        guard let i = columns.firstIndex(of: column) else {
            throw PostgresError(.decoding, message: "no column \(column)")
        }
        guard let text = values[i] else { return nil }
        guard let value = T(postgresText: text) else {
            throw PostgresError(.decoding, message: "column \(column) is not a \(T.self)")
        }
        return value
    }

    /// The column's value; NULL is an error.
    @inlinable
    public func require<T: PostgresDecodable>(_ column: String, as type: T.Type = T.self) throws -> T {
        guard let value = try decode(column, as: type) else {
            throw PostgresError(.decoding, message: "column \(column) is NULL")
        }
        return value
    }
}
