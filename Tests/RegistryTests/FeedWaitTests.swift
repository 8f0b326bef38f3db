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
        func relay(limit: Int) async throws -> Int { 0 }
    }

    static func perSecond(_ waiters: Int, _ interval: Duration) -> Double {
        Double(waiters) / (Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18)
    }

    @Test func theIntervalGrowsWithTheWaitersOfAProjectAndItsPartOfTheReplica() {
        #expect(FeedWaiters.interval(project: 1, projects: 1) == .milliseconds(200))
        #expect(FeedWaiters.interval(project: 8, projects: 1) == .milliseconds(200))
        #expect(FeedWaiters.interval(project: 9, projects: 1) == .milliseconds(225))
        #expect(FeedWaiters.interval(project: 80, projects: 1) == .seconds(2))
        // Another project's crowd does not slow a project of few waiters (it held them at 16 s).
        #expect(FeedWaiters.interval(project: 2, projects: 2) == .milliseconds(200))
        #expect(FeedWaiters.interval(project: 10_000, projects: 2) >= .seconds(250))
        for project in 1...300 {
            // The waiters of one project together ask at most freePerProject times every 200 ms.
            let rate = Self.perSecond(project, FeedWaiters.interval(project: project, projects: 1))
            #expect(rate <= Double(FeedWaiters.freePerProject) * 5 + 1e-9, "\(project) waiters")
        }
    }

    /// Generated replicas of waiting projects: every project's waiters together ask no more often than freeInAll
    /// waiters would (plus each project's first 200 ms, when there are fewer than freeInAll of them), and a project
    /// with no more waiters than its even part of the replica asks every 200 ms whatever the others hold.
    @Test func theReplicasRateIsBoundAndAFairShareIsNeverSlowed() {
        var random = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            let projects = (0..<Int.random(in: 1...400, using: &random)).map { _ in
                Bool.random(using: &random) ? Int.random(in: 1...4, using: &random) : Int.random(in: 1...20_000, using: &random)
            }
            let rates = projects.map { Self.perSecond($0, FeedWaiters.interval(project: $0, projects: projects.count)) }
            let bound = Double(max(FeedWaiters.freeInAll, 0)) * 5
            #expect(rates.reduce(0, +) <= bound + 1e-6 * Double(projects.count), "\(projects.count) projects")
            for (waiters, rate) in zip(projects, rates)
            where Double(waiters) * Double(projects.count) <= Double(FeedWaiters.freeInAll) && waiters <= FeedWaiters.freePerProject {
                #expect(abs(rate - Double(waiters) * 5) < 1e-6)
            }
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
