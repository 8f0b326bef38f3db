import Foundation
import Testing

/// Every statement that locks rows in an order of text keys orders them byte by byte (`COLLATE "C"`), as group commit
/// orders its writes (Swift compares these ASCII keys by their bytes) and the feedback function locks its
/// registrations. Under a database whose default collation is a language's (`en_US.UTF-8`: the compose file's image),
/// `ORDER BY fid` put `a…` before `B…` where the others put it after, and two such transactions could lock two
/// installations in opposite orders and deadlock. The test clusters use `--locale=C`, where no run could show it: so
/// the sources are read, every locking `ORDER BY` of the store and its migrations is found, and each text key in it
/// must name its collation.
@Suite("Lock order")
struct LockOrderTests {
    /// Columns of ours that hold text and are locked by (keys a statement may order its locks by).
    static let textKeys: Set<String> = [
        "fid", "token", "topic", "user_id", "name", "service", "project_id", "apns_token", "erasure_id", "sender",
    ]

    static var store: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/RegistryPostgres")
    }

    /// `(file, ORDER BY terms)` of every `ORDER BY` that its statement locks rows in (across lines: up to the
    /// locking clause, with no other clause between).
    static func lockingOrders() throws -> [(String, [String])] {
        let locking = try NSRegularExpression(
            pattern: #"ORDER BY\s+((?:(?!SELECT|FROM|WHERE|ORDER BY|;)[\s\S])+?)\s+(?:LIMIT\s+\S+\s+)?FOR\s+(?:NO KEY UPDATE|UPDATE|KEY SHARE|SHARE)\b"#)
        guard let walker = FileManager.default.enumerator(at: store, includingPropertiesForKeys: nil) else { return [] }
        var found: [(String, [String])] = []
        for case let url as URL in walker where ["swift", "sql"].contains(url.pathExtension) {
            let text = try String(contentsOf: url, encoding: .utf8)
            for match in locking.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                guard let terms = Range(match.range(at: 1), in: text) else { continue }
                found.append(
                    (url.lastPathComponent,
                     text[terms].split(separator: ",").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }))
            }
        }
        return found
    }

    @Test func everyLockingOrderOfTextKeysIsByteOrder() throws {
        let orders = try Self.lockingOrders()
        // The sweep finds the statements it is about (the topic batch, the person's cap, the purge, the deliveries…).
        #expect(orders.count >= 6, "found only \(orders)")
        var unordered: [String] = []
        for (file, terms) in orders {
            for term in terms where !term.contains(#"COLLATE "C""#) {
                // A column, qualified or not, with or without a direction; an expression orders no key.
                let words = term.split(whereSeparator: \.isWhitespace)
                guard let first = words.first, words.count <= 2,
                    first.allSatisfy({ $0.isLetter || $0 == "_" || $0 == "." })
                else { continue }
                if Self.textKeys.contains(String(first.split(separator: ".").last ?? "")) {
                    unordered.append("\(file): \(term)")
                }
            }
        }
        #expect(unordered.isEmpty, "order these locks by bytes (COLLATE \"C\"): \(unordered)")
    }
}
