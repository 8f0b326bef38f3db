import Foundation

/// Deletes installations idle longer than the expiry period, with reason `inactivity`. Any number of replicas
/// may run it at once: each deletion re-checks idleness under the installation's lock, and only one succeeds.
public struct ExpiryJob: Sendable {
    let installations: InstallationService
    let store: any InstallationStore
    let policy: DeletionPolicy
    let clock: JobClock

    /// - Returns: the installations deleted.
    public func run(batch: Int = 500) async throws -> Int { try await runReporting(batch: batch).processed }

    /// Deletes idle installations one by one: one whose deletion fails is counted and left for the next run, and the
    /// others go on (a database that cannot be reached stops the run).
    ///
    /// - Returns: the installations deleted and those whose deletion failed.
    public func runReporting(batch: Int = 500) async throws -> (processed: Int, failed: Int) {
        let cutoff = try await clock.now().addingTimeInterval(-policy.expireAfter)
        var count = 0
        var failed = 0
        for idle in try await store.idle(before: cutoff, limit: batch) {
            do {
                if try await installations.delete(
                    projectID: idle.projectID, fid: idle.fid, reason: .inactivity, idleBefore: cutoff)
                {
                    count += 1
                }
            } catch let error as RegistryError where error.kind == .unavailable {
                throw error
            } catch {
                failed += 1
            }
        }
        return (count, failed)
    }
}

/// Reports each registration that passed the expiry age once, as `registration.expired`. Expiry itself is decided
/// when read, from the last refresh, so targeting never waits for this job.
public struct RegistrationExpiryJob: Sendable {
    let store: any MaintenanceStore
    let freshness: Freshness
    let clock: JobClock

    /// - Returns: the registrations reported.
    public func run(batch: Int = 1000) async throws -> Int {
        try await store.reportExpiredRegistrations(
            before: try await clock.now().addingTimeInterval(-freshness.expireAfter), limit: batch)
    }
}
