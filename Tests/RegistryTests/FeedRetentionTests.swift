import Foundation
import Registry
import Testing

/// The change feed keeps its events for the retention period, and the purge drops them oldest first.
@Suite("Change-feed retention")
struct FeedRetentionTests {
    @Test(arguments: StoreKind.available)
    func thePurgeDropsEventsOlderThanTheRetentionAndKeepsTheRest(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let first = try await f.installation()
            // PostgreSQL stamps events with its own clock, the in-memory store with the fixture's: both move on.
            try await Task.sleep(for: .milliseconds(1100))
            f.clock.advance(by: 2)
            let second = try await f.installation()
            func feed() async throws -> [FeedEvent] {
                try await f.services.feed.events(projectID: f.project.id, after: 0, limit: 100)
            }
            // The relay waits for every older transaction of the cluster (other tests' too) to end.
            var events: [FeedEvent] = []
            for _ in 0..<100 where events.count < 2 {
                _ = try await f.services.jobs.relayEvents()
                events = try await feed()
                if events.count < 2 { try await Task.sleep(for: .milliseconds(100)) }
            }
            try #require(events.map(\.fid) == [first.fid, second.fid])
            let retention = DeletionPolicy().eventRetention
            // The cut-off falls on the second event: the first is older than the retention, the second is not.
            f.clock.set(events[1].time.addingTimeInterval(retention))
            _ = try await f.services.jobs.purge.run()
            #expect(try await feed().map(\.fid) == [second.fid])
            // A second later the second one has aged out too.
            f.clock.advance(by: 1)
            _ = try await f.services.jobs.purge.run()
            #expect(try await feed().isEmpty)
        }
    }
}
