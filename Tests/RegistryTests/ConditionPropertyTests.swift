import Foundation
import Registry
import Testing
import TokenRegistryTesting

/// Who a condition reaches, on both stores, against a model: random installations on random topics (some without
/// consent), random conditions of the FCM grammar, paged with random page sizes. The SQL drives a page from a topic
/// every target must have when there is one and bounds every subquery by the cursor; the model does neither, so a
/// plan that loses or repeats a target, or leaves FID order, is found here.
@Suite("Conditions against a model")
struct ConditionPropertyTests {
    static let topics = ["a", "b", "c", "d", "e"]

    static func holds(_ condition: Condition, _ topics: Set<String>) -> Bool {
        switch condition {
        case let .topic(name): return topics.contains(name)
        case let .not(inner): return !holds(inner, topics)
        case let .and(x, y): return holds(x, topics) && holds(y, topics)
        case let .or(x, y): return holds(x, topics) || holds(y, topics)
        case .users: return false
        }
    }

    static func random(_ depth: Int, _ rng: inout SplitMix) -> Condition {
        if depth == 0 || Int.random(in: 0..<3, using: &rng) == 0 {
            return .topic(topics.randomElement(using: &rng)!)
        }
        switch Int.random(in: 0..<4, using: &rng) {
        case 0: return .not(random(depth - 1, &rng))
        case 1, 2: return .and(random(depth - 1, &rng), random(depth - 1, &rng))
        default: return .or(random(depth - 1, &rng), random(depth - 1, &rng))
        }
    }

    @Test(arguments: StoreKind.available)
    func everyConditionReachesWhatTheModelSays(_ kind: StoreKind) async throws {
        var rng = SplitMix(seed: 0x7c0de5)
        try await DomainFixture.with(kind) { f in
            var model: [String: Set<String>] = [:]
            for n in 0..<24 {
                let installation = try await f.installation()
                _ = try await f.register(installation)
                let mine = Set(Self.topics.filter { _ in Bool.random(using: &rng) })
                for topic in mine {
                    _ = try await f.services.topics.subscribe(project: f.project, fid: installation.fid, topic: topic)
                }
                if n % 6 == 5 {
                    try await f.consent(installation, false)
                } else {
                    model[installation.fid] = mine
                }
            }
            for _ in 0..<40 {
                let condition = Self.random(3, &rng)
                let expected = model.filter { Self.holds(condition, $0.value) }.keys.sorted()
                var seen: [String] = []
                var after: String?
                let limit = Int.random(in: 1...7, using: &rng)
                while true {
                    let page = try await f.services.targeting.resolve(
                        projectID: f.project.id, condition: condition, after: after, limit: limit)
                    seen += page.map(\.fid)
                    guard page.count == limit, let last = page.last?.fid else { break }
                    after = last
                }
                #expect(seen == expected, "\(condition), pages of \(limit)")
            }
        }
    }
}
