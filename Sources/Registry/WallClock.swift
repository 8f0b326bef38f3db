import Foundation
import Synchronization

/// Where the domain reads the time for what it stamps on records (creation, refresh, consent decisions) and for
/// the rules it computes (staleness, deadlines), so a test can move through 180 days in a second.
public protocol WallClock: Sendable {
    func now() -> Date
}

/// The system's wall clock.
public struct SystemClock: WallClock {
    public init() {}
    public func now() -> Date { Date() }
}

/// A clock that stands still until moved; for tests and `jobs run --now`.
public final class ManualClock: WallClock {
    private let current: Mutex<Date>

    public init(_ date: Date) { current = Mutex(date) }

    public func now() -> Date { current.withLock { $0 } }

    public func set(_ date: Date) { current.withLock { $0 = date } }

    public func advance(by seconds: TimeInterval) { current.withLock { $0 = $0.addingTimeInterval(seconds) } }
}
