import Foundation
import Synchronization

/// Token buckets per key (an API key, a client address): `ratePerSecond` sustained, `burst` at once.
///
/// Limits are per replica; behind a load balancer with N replicas the effective limit is N times higher.
public final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: Double
    }

    public let ratePerSecond: Double
    public let burst: Double
    private let buckets = Mutex<[String: Bucket]>([:])

    public init(ratePerSecond: Double, burst: Double) {
        self.ratePerSecond = ratePerSecond
        self.burst = max(1, burst)
    }

    /// Takes one token for `key`.
    ///
    /// - Returns: nil when allowed, else the whole seconds to wait before retrying.
    public func acquire(_ key: String, now: Double = Date().timeIntervalSince1970) -> Int? {
        guard ratePerSecond > 0 else { return nil }
        return buckets.withLock { all -> Int? in
            if all.count > 100_000 { all = all.filter { now - $0.value.updated < 60 } }
            var bucket = all[key] ?? Bucket(tokens: burst, updated: now)
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.updated) * ratePerSecond)
            bucket.updated = now
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                all[key] = bucket
                return nil
            }
            all[key] = bucket
            return max(1, Int(((1 - bucket.tokens) / ratePerSecond).rounded(.up)))
        }
    }
}
