/// SQL text with its parameters, built by string interpolation that turns every interpolated value into a
/// `$n` bind, so values never become SQL text:
///
/// ```swift
/// let rows = try await pool.query("SELECT fid FROM installations WHERE project_id = \(project) AND fid = \(fid)")
/// ```
///
/// Use ``unsafeSQL(_:)`` inside the interpolation only for trusted identifiers or fragments built by the code.
public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation {
    public var sql: String
    public var binds: [String?]
    /// Whether the statement is prepared once per connection and kept (the default). Set false for SQL whose text a
    /// client shapes (a condition's operators): sent unnamed, such a statement is planned each time and never
    /// accumulates in the connection's cache, which would otherwise grow with every new shape.
    public var isPrepared = true

    public init(stringLiteral value: String) {
        sql = value
        binds = []
    }

    public init(unsafeSQL sql: String, binds: [String?] = []) {
        self.sql = sql
        self.binds = binds
    }

    public init(stringInterpolation: StringInterpolation) {
        sql = stringInterpolation.sql
        binds = stringInterpolation.binds
    }

    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var binds: [String?] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount * 3)
            binds.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) { sql += literal }

        public mutating func appendInterpolation(_ value: some PostgresEncodable) {
            binds.append(value.postgresText)
            appendPlaceholder()
        }

        /// Binds an optional value; nil becomes SQL NULL.
        public mutating func appendInterpolation<Value: PostgresEncodable>(_ value: Value?) {
            binds.append(value?.postgresText ?? nil)
            appendPlaceholder()
        }

        /// `$n` for the bind just added: a prepared String for $1 to $63 (no interpolation on the way).
        private mutating func appendPlaceholder() {
            let n = binds.count
            sql += n < StringInterpolation.placeholders.count ? StringInterpolation.placeholders[n] : "$\(n)"
        }

        private static let placeholders = (0..<64).map { "$\($0)" }

        /// Appends trusted SQL text as is (identifiers, fragments the code chose); never pass client input.
        public mutating func appendInterpolation(unsafeSQL fragment: String) { sql += fragment }
    }
}
