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
            try await f.services.jobs.relay {
                events = try await feed()
                return events.count >= 2
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

    /// A backlog moves a batch at a time, oldest first: each run moves at most its batches, and the next goes on
    /// where it stopped, so no one statement has to move everything the feed held back.
    @Test(arguments: StoreKind.available)
    func aBacklogIsRelayedABatchAtATimeInOrder(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            var created: [String] = []
            for _ in 0..<23 { created.append(try await f.installation().fid) }
            func feed() async throws -> [String] {
                try await f.services.feed.events(projectID: f.project.id, after: 0, limit: 100).map(\.fid)
            }
            // The relay waits for every older transaction of the cluster (other tests' too) to end; then a run of
            // two batches of five moves ten, and no more, of this project's and others' events.
            var first = 0
            for _ in 0..<100 where first == 0 {
                first = try await f.services.jobs.relayEvents(batch: 5, maxBatches: 2)
                if first == 0 { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(first <= 10)
            let moved = try await feed()
            #expect(moved.count <= 10 && moved == Array(created.prefix(moved.count)), "\(moved.count)")
            for _ in 0..<100 where try await feed().count < created.count {
                _ = try await f.services.jobs.relayEvents(batch: 5, maxBatches: 2)
            }
            #expect(try await feed() == created)
        }
    }
}
