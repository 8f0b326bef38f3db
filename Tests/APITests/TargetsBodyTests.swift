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

    /// A page ends at its byte bound with the token of its last target, whatever the tokens' sizes: generated pages of
    /// random token lengths against a small bound are each the generic encoder's page of the targets that fit, and
    /// following their tokens yields every target once, in order.
    @Test(arguments: 0..<20)
    func aPageEndsAtItsByteBoundAndGoesOnFromThere(_ seed: Int) throws {
        var generator = SplitMix(seed: UInt64(seed))
        let all = (0..<Int.random(in: 1...60, using: &generator)).map { n in
            Target(
                fid: String(format: "f%04d", n),
                token: String(repeating: "t", count: Int.random(in: 1...2048, using: &generator)), platform: .android,
                refreshedAt: Date(timeIntervalSince1970: 1e9), stale: false, quarantined: false)
        }
        let bound = Int.random(in: 1...20_000, using: &generator)
        let size = Int.random(in: 1...70, using: &generator)
        var seen: [String] = []
        var rest = all[...]
        while true {
            let page = Array(rest.prefix(size + 1))
            let body = try JSONParser.parse(TopicsController.targetsBody(page, size: size, maxBytes: bound))
            let fids = body["registrations"]?.arrayValue?.compactMap { $0["fid"]?.stringValue } ?? []
            #expect(!fids.isEmpty || page.isEmpty)
            // Within the bound but for the last target written.
            let written = TopicsController.targetsBody(Array(page.prefix(fids.count)), size: fids.count, maxBytes: .max)
            let lastSize = 2048 + 200
            #expect(written.count <= bound + lastSize)
            seen += fids
            guard let token = body["nextPageToken"]?.stringValue else { break }
            #expect(try Paging.decode(token) == fids.last)
            rest = rest.drop { $0.fid <= fids.last! }
        }
        #expect(seen == all.map(\.fid))
    }
}
