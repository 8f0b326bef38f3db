import Foundation

/// Where the jobs read the time. By default the database's clock (`now()`), the one clock every replica shares, so
/// a replica whose own clock jumps forward cannot delete live installations for "inactivity" or purge early. An
/// explicit clock serves `jobs run --now <time>` (an operator's deliberate time) and tests.
public struct JobClock: Sendable {
    public enum Source: Sendable {
        case database
        case explicit(any WallClock)
    }

    /// Destructive jobs (expiry, purge) do not run while this replica's clock and the database's differ by more.
    public static let maxSkew: TimeInterval = 60

    let source: Source
    let store: any MaintenanceStore
    /// This replica's own clock, compared with the database's.
    let replica: any WallClock

    public init(_ source: Source, store: any MaintenanceStore, replica: any WallClock = SystemClock()) {
        self.source = source
        self.store = store
        self.replica = replica
    }

    public func now() async throws -> Date {
        switch source {
        case .database: return try await store.databaseNow()
        case let .explicit(clock): return clock.now()
        }
    }

    /// This replica's clock minus the database's, in seconds (the round trip's midpoint against the database's
    /// time); nil when the time is explicit.
    public func skew() async throws -> TimeInterval? {
        guard case .database = source else { return nil }
        let before = replica.now()
        let database = try await store.databaseNow()
        let after = replica.now()
        return before.addingTimeInterval(after.timeIntervalSince(before) / 2).timeIntervalSince(database)
    }
}
