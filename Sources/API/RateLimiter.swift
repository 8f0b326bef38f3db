import Foundation
import Synchronization

/// Token buckets per key (an API key, a client address): `ratePerSecond` sustained, `burst` at once.
///
/// Memory is bounded without ever scanning the map: buckets live in two generations; a key is looked up in the
/// current one, then the previous one; every `window` seconds, or when the current generation holds `capacity`
/// keys, the previous generation is dropped whole and the current one becomes the previous. A key not seen for two
/// windows starts again with a full bucket, which is what it would have after that long anyway (`window` is at
/// least the time to refill a bucket). Limits are per replica; behind N replicas the effective limit is N times
/// higher.
public final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: Double
    }

    private struct Generations {
        var current: [String: Bucket] = [:]
        var previous: [String: Bucket] = [:]
        var rotated: Double = 0
    }

    public let ratePerSecond: Double
    public let burst: Double
    let capacity: Int
    let window: Double
    private let state = Mutex(Generations())

    public init(ratePerSecond: Double, burst: Double, capacity: Int = 100_000) {
        self.ratePerSecond = ratePerSecond
        self.burst = max(1, burst)
        self.capacity = max(1, capacity)
        window = max(60, ratePerSecond > 0 ? max(1, burst) / ratePerSecond : 60)
    }

    /// Keys held now (both generations), for tests and metrics.
    public var keys: Int { state.withLock { $0.current.count + $0.previous.count } }

    /// Takes one token for `key`.
    ///
    /// - Returns: nil when allowed, else the whole seconds to wait before retrying.
    public func acquire(_ key: String, now: Double = Date().timeIntervalSince1970) -> Int? {
        guard ratePerSecond > 0 else { return nil }
        return state.withLock { g -> Int? in
            if now - g.rotated >= window || g.current.count >= capacity {
                g.previous = g.current
                g.current = [:]
                g.current.reserveCapacity(min(capacity, 1024))
                g.rotated = now
            }
            var bucket = g.current[key] ?? g.previous[key] ?? Bucket(tokens: burst, updated: now)
            bucket.tokens = min(burst, bucket.tokens + max(0, now - bucket.updated) * ratePerSecond)
            bucket.updated = now
            defer { g.current[key] = bucket }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return max(1, Int(((1 - bucket.tokens) / ratePerSecond).rounded(.up)))
        }
    }
}
