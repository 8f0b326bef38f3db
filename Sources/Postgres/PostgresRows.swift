/// The rows of a result, with values in PostgreSQL's text format.
///
/// The values are kept row after row in one flat array: a page of 10,000 rows is one allocation for its cells, not
/// one more per row.
public struct PostgresRows: Sendable, Sequence {
    public let columns: [String]
    /// Every cell, row by row (`columns.count` a row); nil for NULL.
    let cells: [String?]
    /// Rows changed, for INSERT/UPDATE/DELETE.
    public let affectedRows: Int
    public let count: Int

    init(columns: [String], cells: [String?], count: Int, affectedRows: Int) {
        self.columns = columns
        self.cells = cells
        self.count = count
        self.affectedRows = affectedRows
    }

    public var isEmpty: Bool { count == 0 }
    public var first: PostgresRow? { isEmpty ? nil : PostgresRow(cells: cells, offset: 0, columns: columns) }

    public func makeIterator() -> AnyIterator<PostgresRow> {
        var row = 0
        let (cells, columns, count) = (self.cells, self.columns, self.count)
        return AnyIterator {
            guard row < count else { return nil }
            defer { row += 1 }
            return PostgresRow(cells: cells, offset: row * columns.count, columns: columns)
        }
    }
}

/// One row; columns are read by name.
public struct PostgresRow: Sendable {
    /// The result's cells, shared by its rows; this row's start at `offset`.
    @usableFromInline let cells: [String?]
    @usableFromInline let offset: Int
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
        guard let text = cells[offset + i] else { return nil }
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
