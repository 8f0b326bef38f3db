import Synchronization
import Foundation

/// Deletes installations idle longer than the expiry period, with reason `inactivity`. Any number of replicas
/// may run it at once: each deletion re-checks idleness under the installation's lock, and only one succeeds.
public struct ExpiryJob: Sendable {
    let installations: InstallationService
    let store: any InstallationStore
    let policy: DeletionPolicy
    let clock: JobClock
    let passedOver = PassedOver()

    /// - Returns: the installations deleted.
    public func run(batch: Int = 500) async throws -> Int { try await runReporting(batch: batch).processed }

    /// Deletes idle installations one by one: one whose deletion fails is counted and left for a later run, and the
    /// others go on. Only a database that cannot be reached stops the run: a deletion that timed out, waited too long
    /// for a lock or met a concurrent change (``RegistryError/contended``) fails that installation alone, which is
    /// then passed over for ``PassedOver/backOff`` (the idle are read oldest first, so it would otherwise come first
    /// every round and cost every round its time-out). An installation whose row another transaction holds is in
    /// use, and not waited for (the store skips it): it is passed over likewise.
    ///
    /// - Returns: the installations deleted and those whose deletion failed.
    public func runReporting(batch: Int = 500) async throws -> (processed: Int, failed: Int) {
        let now = try await clock.now()
        let cutoff = now.addingTimeInterval(-policy.expireAfter)
        let skipped = passedOver.current(at: now)
        var count = 0
        var failed = 0
        for idle in try await store.idle(before: cutoff, limit: batch + skipped.count)
        where !skipped.contains(PassedOver.key(idle.projectID, idle.fid)) {
            do {
                if try await installations.delete(
                    projectID: idle.projectID, fid: idle.fid, reason: .inactivity, idleBefore: cutoff)
                {
                    count += 1
                } else {
                    // Its row was held (in use), or it was seen or deleted meanwhile: passed over, so a tenant that
                    // keeps its oldest idle installations' rows locked cannot fill every round with them.
                    passedOver.add(PassedOver.key(idle.projectID, idle.fid), at: now)
                }
            } catch let error as RegistryError where error.kind == .unavailable && !error.contended {
                throw error
            } catch {
                failed += 1
                passedOver.add(PassedOver.key(idle.projectID, idle.fid), at: now)
            }
        }
        return (count, failed)
    }

    /// Installations whose expiry failed, passed over until their back-off ends: at most ``capacity`` (the oldest
    /// failure goes first), per replica.
    final class PassedOver: Sendable {
        static let backOff: TimeInterval = 3600
        static let capacity = 10_000
        private let entries = Mutex<[String: Date]>([:])

        static func key(_ projectID: String, _ fid: String) -> String { projectID + "/" + fid }

        func add(_ key: String, at now: Date) {
            entries.withLock { entries in
                entries[key] = now.addingTimeInterval(Self.backOff)
                if entries.count > Self.capacity, let oldest = entries.min(by: { $0.value < $1.value })?.key {
                    entries[oldest] = nil
                }
            }
        }

        /// The keys still passed over at `now`; those whose back-off ended are forgotten.
        func current(at now: Date) -> Set<String> {
            entries.withLock { entries in
                entries = entries.filter { $0.value > now }
                return Set(entries.keys)
            }
        }
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
