import Foundation

/// Removes deletion records once every service confirmed and the audit period passed, and everything left of a
/// FID at its 180-day deadline; services that never confirmed are reported as overdue, by FID hash.
public struct PurgeJob: Sendable {
    let store: any MaintenanceStore
    let policy: DeletionPolicy
    let clock: JobClock

    /// - Returns: the deletion records removed.
    public func run() async throws -> Int {
        let now = try await clock.now()
        return try await store.purge(
            at: now, completedBefore: now.addingTimeInterval(-policy.auditPeriod),
            eventsBefore: now.addingTimeInterval(-policy.eventRetention))
    }
}
