/// The rows of a result, with values in PostgreSQL's text format.
public struct PostgresRows: Sendable, Sequence {
    public let columns: [String]
    public let values: [[String?]]
    /// Rows changed, for INSERT/UPDATE/DELETE.
    public let affectedRows: Int
    private let index: [String: Int]

    init(columns: [String], values: [[String?]], affectedRows: Int) {
        self.columns = columns
        self.values = values
        self.affectedRows = affectedRows
        var index: [String: Int] = [:]
        for (i, c) in columns.enumerated() where index[c] == nil { index[c] = i }
        self.index = index
    }

    public var count: Int { values.count }
    public var isEmpty: Bool { values.isEmpty }
    public var first: PostgresRow? { values.first.map { PostgresRow(values: $0, index: index) } }

    public func makeIterator() -> AnyIterator<PostgresRow> {
        var iterator = values.makeIterator()
        let index = self.index
        return AnyIterator { iterator.next().map { PostgresRow(values: $0, index: index) } }
    }
}

/// One row; columns are read by name.
public struct PostgresRow: Sendable {
    @usableFromInline let values: [String?]
    @usableFromInline let index: [String: Int]

    /// The column's value, or nil for NULL.
    ///
    /// - Throws: ``PostgresError`` `.decoding` when the column is missing or does not decode as `T`.
    /// Inlinable, so the stores' calls are specialised for their types: decoding runs once per column per row.
    @inlinable
    public func decode<T: PostgresDecodable>(_ column: String, as type: T.Type = T.self) throws -> T? {
        guard let i = index[column] else {
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
