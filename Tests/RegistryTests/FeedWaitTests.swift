import Synchronization
import Testing

@testable import Registry

/// Long-polls of the change feed share their project's rate of questions to the store: a crowd of waiters on one
/// project asks no more often than ``FeedWaiters/freePerProject`` of them would (it asked 5 times a second each).
@Suite("Change feed long-polls")
struct FeedWaitTests {
    /// A feed with no events, counting the questions.
    final class EmptyFeed: ChangeFeedStore {
        let asked = Atomic<Int>(0)
        func events(projectID: String, after cursor: Int64, limit: Int) async throws -> [FeedEvent] {
            asked.add(1, ordering: .relaxed)
            return []
        }
        func relay() async throws -> Int { 0 }
    }

    @Test func theIntervalGrowsWithTheWaitersOfAProjectAndOfTheReplica() {
        #expect(FeedWaiters.interval(project: 1, total: 1) == .milliseconds(200))
        #expect(FeedWaiters.interval(project: 8, total: 8) == .milliseconds(200))
        #expect(FeedWaiters.interval(project: 9, total: 9) == .milliseconds(400))
        #expect(FeedWaiters.interval(project: 80, total: 80) == .seconds(2))
        #expect(FeedWaiters.interval(project: 1, total: 129) == .milliseconds(400))
        for project in 1...300 {
            // The waiters of one project together ask at most freePerProject times every 200 ms.
            let interval = FeedWaiters.interval(project: project, total: project).components
            let perSecond = Double(project) / (Double(interval.seconds) + Double(interval.attoseconds) / 1e18)
            #expect(perSecond <= Double(FeedWaiters.freePerProject) * 5 + 1e-9, "\(project) waiters")
        }
    }

    /// 64 callers wait 2 s on one project: at most about 8 × 5 × 2 questions between their first and last (each asks
    /// once on arrival and may ask once at its deadline), against 64 × 10 when each polled on its own.
    @Test func aCrowdOfWaitersSharesItsProjectsRate() async throws {
        let store = EmptyFeed()
        let feed = ChangeFeed(store: store)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<64 {
                group.addTask { _ = try await feed.events(projectID: "crowded", after: 0, limit: 10, waitSeconds: 2) }
            }
            try await group.waitForAll()
        }
        let asked = store.asked.load(ordering: .relaxed)
        #expect(asked >= 64)
        #expect(asked <= 64 * 2 + 8 * 5 * 2 + 16, "asked \(asked) times")
        #expect(feed.waiters.total == 0)
    }
}
