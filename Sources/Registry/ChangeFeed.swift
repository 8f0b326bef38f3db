/// The change feed app backends follow: events of a project in commit-safe order, by cursor.
public struct ChangeFeed: Sendable {
    let store: any ChangeFeedStore
    let waiters = FeedWaiters()

    public init(store: any ChangeFeedStore) { self.store = store }

    /// Events after `cursor`, at most `limit`; waits up to `waitSeconds` for the first one to arrive.
    ///
    /// A waiting call asks the store again every ``FeedWaiters/interval(project:projects:)``: every 200 ms while its
    /// project has at most ``FeedWaiters/freePerProject`` callers waiting on this replica (and at most its even part of
    /// ``FeedWaiters/freeInAll``), less often beyond, so that a project's waiters together ask at most 40 times a
    /// second however many there are. Before, each waiter asked five times a second for 30 s: a few thousand
    /// long-polls were 10,000 queries a second, and every tenant's requests timed out waiting for a connection.
    public func events(projectID: String, after cursor: Int64, limit: Int, waitSeconds: Int = 0) async throws
        -> [FeedEvent]
    {
        let deadline = ContinuousClock.now + .seconds(min(max(waitSeconds, 0), 60))
        var page = try await store.events(projectID: projectID, after: cursor, limit: limit)
        guard page.isEmpty && ContinuousClock.now < deadline else { return page }
        waiters.enter(projectID)
        defer { waiters.leave(projectID) }
        while page.isEmpty && ContinuousClock.now < deadline {
            let pause = min(waiters.interval(projectID), deadline - ContinuousClock.now)
            try await Task.sleep(for: pause)
            page = try await store.events(projectID: projectID, after: cursor, limit: limit)
        }
        return page
    }
}

/// The long-polls waiting on this replica, by project: how often each asks the store.
final class FeedWaiters: Sendable {
    /// Waiters of one project that ask every ``baseMillis`` ms; more share that rate.
    static let freePerProject = 8
    /// Waiters of all projects that ask every ``baseMillis`` ms; more share that rate.
    static let freeInAll = 128
    static let baseMillis = 200

    private let waiting = ProjectCounts()

    func enter(_ project: String) { _ = waiting.enter(project) }

    func leave(_ project: String) { waiting.leave(project) }

    /// The pause between a waiter's questions now.
    func interval(_ project: String) -> Duration {
        let (inProject, projects) = waiting.share(project)
        return Self.interval(project: inProject, projects: projects)
    }

    /// 200 ms for up to ``freePerProject`` waiters of the project, and up to its even part of ``freeInAll`` among the
    /// `projects` with waiters; beyond, as many times longer as it takes for its waiters together to ask no more often
    /// than that many would. Together, every project's waiters ask no more often than `freeInAll` would; a project's
    /// crowd slows its own waiters, never another's (the replica's count slowed every project's alike, so one
    /// project's 10,000 long-polls held every other project's at 16 s).
    static func interval(project: Int, projects: Int) -> Duration {
        let perProject = Double(project) / Double(freePerProject)
        let ofTheReplica = Double(project) * Double(max(projects, 1)) / Double(freeInAll)
        let share = max(1, perProject, ofTheReplica)
        return .milliseconds(Int64((Double(baseMillis) * share).rounded(.up)))
    }

    var total: Int { waiting.total }
}
