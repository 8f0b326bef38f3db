import Crypto
import Foundation
import Synchronization
import Testing
import TokenRegistryTesting

@testable import Registry

/// Misses (what random credentials make) never push the values in use out of a look-up cache.
@Suite("Look-up caches")
struct TTLCacheTests {
    @Test func aFloodOfMissesLeavesTheValuesInUse() {
        let cache = TTLCache<String, String>(capacity: 1000)
        cache.store("real-key", "real-project", ttl: 30)
        var random = SplitMix(seed: 7)
        for _ in 0..<20_000 { cache.store("random-\(random.next())", nil, ttl: 2) }
        #expect(cache.lookup("real-key") == .some("real-project"))
        #expect(cache.counts.missing <= 100)
        // A miss that becomes a value is a value, and the other way round.
        cache.store("later", nil, ttl: 30)
        #expect(cache.lookup("later") == .some(nil))
        cache.store("later", "now-found", ttl: 30)
        #expect(cache.lookup("later") == .some("now-found"))
        cache.store("later", nil, ttl: 30)
        #expect(cache.lookup("later") == .some(nil))
        cache.remove("later")
        #expect(cache.lookup("later") == nil)
    }
}

/// Requests that find the signing-key ring stale, or meet a `kid` it lacks, share one reload.
@Suite("Signing key reloads")
struct SigningKeyReloadTests {
    /// Keys kept in memory; counts the loads and makes each take a while, so that requests overlap it.
    final class SlowKeys: SigningKeyStore {
        let keys = Mutex<[StoredSigningKey]>([])
        let loads = Atomic<Int>(0)
        func all() async throws -> [StoredSigningKey] {
            loads.add(1, ordering: .relaxed)
            try await Task.sleep(for: .milliseconds(100))
            return keys.withLock { $0 }
        }
        func insert(_ key: StoredSigningKey) async throws { keys.withLock { $0.append(key) } }
        func insertFirst(_ key: StoredSigningKey) async throws {
            keys.withLock { if $0.isEmpty { $0.append(key) } }
        }
        func retire(kid: String, at: Date) async throws -> Bool { false }
    }

    @Test func tokensWithUnknownKeysShareOneReload() async throws {
        let store = SlowKeys()
        let issuer = TokenIssuer(store: store, clock: SystemClock())
        try await issuer.reload()
        // The ring is older than the 5 s an unknown kid's reload waits for.
        try await Task.sleep(for: .seconds(5.2))
        let before = store.loads.load(ordering: .relaxed)
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<50 {
                let header = Base64URL.encode(Array(#"{"alg":"ES256","kid":"k\#(i)","typ":"JWT"}"#.utf8))
                let token = header + ".e30." + String(repeating: "A", count: 86)
                group.addTask { _ = try? await issuer.verify(token) }
            }
        }
        let loads = store.loads.load(ordering: .relaxed) - before
        #expect(loads >= 1)
        #expect(loads <= 2, "\(loads) loads for 50 tokens")
    }
}
