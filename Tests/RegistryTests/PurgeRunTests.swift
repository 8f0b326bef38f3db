import Foundation
import Testing

@testable import Registry

/// A purge run's shape against a store that counts its calls: records go in batches up to the run's bound, and the
/// round's work (feed events, erasure scrubs, the count fold) once a run, however many batches there were.
@Suite("A purge run")
struct PurgeRunTests {
    actor Counting: MaintenanceStore {
        var due: Int
        var batches: [Int] = []
        var finishes = 0

        init(due: Int) { self.due = due }

        func purge(at now: Date, completedBefore: Date, limit: Int) async throws -> Int {
            let removed = min(limit, due)
            due -= removed
            batches.append(removed)
            return removed
        }

        func finishPurge(at now: Date, eventsBefore: Date) async throws { finishes += 1 }
        func reportExpiredRegistrations(before cutoff: Date, limit: Int) async throws -> Int { 0 }
        func recordRun(job: String, at: Date, durationSeconds: Double, processed: Int) async throws {}
        func registrationCounts(staleBefore: Date, expiredBefore: Date) async throws -> [String: Int] { [:] }
        func databaseNow() async throws -> Date { Date() }
        func gauges(at now: Date) async throws -> RegistryGauges { try await unusedByThePurge() }
        private func unusedByThePurge() async throws -> RegistryGauges {
            throw RegistryError(.internal, "the purge reads no gauges")
        }
    }

    @Test(arguments: [0, 1, 999, 1000, 1001, 4500, 250_000])
    func aRunGoesInBatchesAndFinishesOnce(due: Int) async throws {
        let store = Counting(due: due)
        var job = PurgeJob(store: store, policy: DeletionPolicy(), clock: JobClock(.database, store: store))
        job.batch = 1000
        job.perRun = 100_000
        let removed = try await job.run()
        #expect(removed == min(due, 100_000))
        let batches = await store.batches
        #expect(batches.allSatisfy { $0 <= 1000 })
        #expect(batches.count == min(due, 100_000) / 1000 + (due < 100_000 ? 1 : 0))
        #expect(await store.finishes == 1)
    }
}
