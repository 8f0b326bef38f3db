import Foundation
import JSON
import Postgres
import Testing
import TokenRegistryTesting

/// Every time a client's RFC 3339 text can name (`clientTime`, an import's times) is one PostgreSQL stores and writes
/// back in a form the service reads. `9999-12-31T23:59:59-12:00` is in the year 10000, UTC: it was stored, written back
/// with a year of five digits, and every read of its row failed (a 500 for each page that held it).
@Suite("Times from clients, stored and read back", .enabled(if: TestDatabase.isAvailable))
struct TimestampStorageTests {
    /// Texts at both ends of the years 1-9999, with every kind of offset, leap seconds and fractions, and some in
    /// between.
    static func texts() -> [String] {
        var random = SystemRandomNumberGenerator()
        var texts: [String] = []
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        for _ in 0..<600 {
            let year = [0, 1, 9999, Int.random(in: 2...9998, using: &random)].randomElement(using: &random)!
            let month = year == 0 || year == 1 ? 1 : year == 9999 ? 12 : Int.random(in: 1...12, using: &random)
            let day = month == 1 ? Int.random(in: 1...2, using: &random) : month == 12 ? Int.random(in: 30...31, using: &random) : 15
            let time = "\(two(Int.random(in: 0...23, using: &random))):\(two(Int.random(in: 0...59, using: &random))):\(two(Int.random(in: 0...60, using: &random)))"
                + ["", ".5", ".999", ".999999", ".9999999", ".999999999"].randomElement(using: &random)!
            let offset = ["Z", "+00:00", "-12:00", "+14:00", "-23:59", "+23:59", "+01:30"].randomElement(using: &random)!
            texts.append(String(repeating: "0", count: 4 - String(year).count) + "\(year)-\(two(month))-\(two(day))T\(time)\(offset)")
        }
        return texts
    }

    @Test func everyTimeAClientCanNameIsReadBack() async throws {
        try await TestDatabase.with { url in
            let pool = PostgresPool(.init(conninfo: url))
            defer { pool.close() }
            let texts = Self.texts()
            let accepted = texts.compactMap { text in Timestamp.parse(text).map { (text, $0) } }
            #expect(accepted.count > 100 && accepted.count < texts.count, "the sweep reaches both sides of the bound")
            let rows = try await pool.query(
                """
                SELECT t::timestamptz AS back FROM unnest(\(TextArray(accepted.map { $0.1.postgresText! }))::text[])
                WITH ORDINALITY AS u(t, n) ORDER BY n
                """)
            #expect(rows.count == accepted.count)
            for (row, (text, date)) in zip(rows, accepted) {
                let back = try? row.require("back", as: Date.self)
                #expect(back.map { abs($0.timeIntervalSince1970 - date.timeIntervalSince1970) < 0.001 } == true, "\(text)")
            }
            #expect(Timestamp.parse("9999-12-31T23:59:59-12:00") == nil)
            for late in ["9999-12-31T23:59:60Z", "9999-12-31T23:59:59.9999999Z", "9999-12-31T23:59:59.999999999Z"] {
                #expect(Timestamp.parse(late).map { $0.timeIntervalSince1970 < Timestamp.end } ?? true, "\(late)")
            }
            for fine in ["9999-12-31T23:59:59.9999Z", "9999-12-31T23:59:59.999Z"] {
                let date = try #require(Timestamp.parse(fine))
                let back = try await pool.query("SELECT \(date)::timestamptz AS back").first?.require("back", as: Date.self)
                #expect(back != nil, "\(fine)")
            }
            #expect(Timestamp.parse("0001-01-01T00:00:00+01:00") == nil)
            #expect(Timestamp.parse("9999-12-31T23:59:59Z") != nil && Timestamp.parse("0001-01-01T00:00:00Z") != nil)
        }
    }
}
