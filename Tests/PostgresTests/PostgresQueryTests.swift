import Testing

@testable import Postgres

@Suite("Query text and binds")
struct PostgresQueryTests {
    /// Placeholders come from a prepared table up to $63 and are written out beyond it: every value still gets its
    /// own `$n`, in order.
    @Test func everyInterpolationBecomesItsOwnPlaceholder() {
        var interpolation = PostgresQuery.StringInterpolation(literalCapacity: 0, interpolationCount: 70)
        var expected = ""
        for n in 1...70 {
            interpolation.appendLiteral(n == 1 ? "SELECT " : ", ")
            interpolation.appendInterpolation(n)
            expected += (n == 1 ? "SELECT " : ", ") + "$\(n)"
        }
        interpolation.appendInterpolation(String?.none)
        expected += "$71"
        let query = PostgresQuery(stringInterpolation: interpolation)
        #expect(query.sql == expected)
        #expect(query.binds == (1...70).map { String($0) } + [nil])
    }
}
