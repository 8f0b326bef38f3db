import Foundation

/// Removes deletion records once every service confirmed and the audit period passed, and everything left of a
/// FID at its 180-day deadline; services that never confirmed are reported as overdue, by FID hash.
public struct PurgeJob: Sendable {
    let store: any MaintenanceStore
    let policy: DeletionPolicy
    let clock: JobClock

    /// Deletion records a transaction removes, and a run at most: a run's cost is that of what it removes, never of
    /// the table, and a backlog (a replica back after days down) drains in short transactions over a few runs.
    public var batch = 1000
    public var perRun = 100_000

    /// - Returns: the deletion records removed.
    public func run() async throws -> Int {
        let now = try await clock.now()
        var total = 0
        while total < perRun {
            let limit = min(batch, perRun - total)
            let removed = try await store.purge(
                at: now, completedBefore: now.addingTimeInterval(-policy.auditPeriod), limit: limit)
            total += removed
            if removed < limit { break }
        }
        // Once a run, not a batch: a backlog's hundred batches would otherwise drop a hundred rounds of events.
        try await store.finishPurge(at: now, eventsBefore: now.addingTimeInterval(-policy.eventRetention))
        return total
    }
}
