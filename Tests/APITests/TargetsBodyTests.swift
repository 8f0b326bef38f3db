import Foundation
import JSON
import Testing
import TokenRegistryTesting

@testable import API
@testable import Registry

/// The hand-written page of targets is exactly what the generic encoder writes for the same members, whatever the
/// tokens hold (quotes, backslashes, control characters, non-ASCII).
@Suite("Targets page writer")
struct TargetsBodyTests {
    static func generic(_ page: [Target], size: Int) -> [UInt8] {
        var members: [(String, JSONValue)] = [
            (
                "registrations",
                .array(
                    page.prefix(size).map { t in
                        .object(
                            [
                                ("token", .string(t.token)), ("fid", .string(t.fid)),
                                ("platform", .string(t.platform.rawValue)), ("stale", .bool(t.stale)),
                                ("refreshTime", .string(Timestamp.rfc3339(t.refreshedAt))),
                            ] + (t.quarantined ? [("quarantined", JSONValue.bool(true))] : []))
                    })
            )
        ]
        if page.count > size, let last = page.prefix(size).last {
            members.append(("nextPageToken", .string(Paging.encode(last.fid))))
        }
        return JSONValue.object(members).encoded()
    }

    @Test(arguments: 0..<20)
    func matchesTheGenericEncoder(_ seed: Int) throws {
        var generator = SplitMix(seed: UInt64(seed))
        let alphabet = Array(#"aZ09:_-."\é☃"#) + ["\n", "\u{01}", "\t", "\u{7f}"]
        let count = Int.random(in: 0...30, using: &generator)
        let page = (0..<count).map { n in
            Target(
                fid: "f\(n)",
                token: String(
                    (0..<Int.random(in: 1...40, using: &generator)).map { _ in
                        alphabet.randomElement(using: &generator)!
                    }), platform: [.ios, .android, .web][n % 3],
                refreshedAt: Date(timeIntervalSince1970: Double.random(in: 0...4e9, using: &generator)),
                stale: n % 2 == 0, quarantined: n % 3 == 1)
        }
        let size = Int.random(in: 1...31, using: &generator)
        let written = TopicsController.targetsBody(page, size: size)
        #expect(written == Self.generic(page, size: size))
        _ = try JSONParser.parse(written)
    }
}
