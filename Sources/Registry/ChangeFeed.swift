/// The change feed app backends follow: events of a project in commit-safe order, by cursor.
public struct ChangeFeed: Sendable {
    let store: any ChangeFeedStore

    public init(store: any ChangeFeedStore) { self.store = store }

    /// Events after `cursor`, at most `limit`; waits up to `waitSeconds` for the first one to arrive.
    public func events(projectID: String, after cursor: Int64, limit: Int, waitSeconds: Int = 0) async throws
        -> [FeedEvent]
    {
        let deadline = ContinuousClock.now + .seconds(min(max(waitSeconds, 0), 60))
        var page = try await store.events(projectID: projectID, after: cursor, limit: limit)
        while page.isEmpty && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(200))
            page = try await store.events(projectID: projectID, after: cursor, limit: limit)
        }
        return page
    }
}
