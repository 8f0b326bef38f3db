import Crypto
import Synchronization

/// Request ids the service makes: 16 hex digits, distinct within a process and unlike another process's.
///
/// A counter from a random start, mixed by SplitMix64's finaliser (a bijection, so no two counts give one id). An id
/// correlates log lines and carries no authority, so it needs no secret randomness: the generator's `RAND_bytes`
/// call per request (with its `getpid` check) was 3 % of a cheap route's CPU.
enum RequestIDs {
    private static let counter = Atomic<UInt64>(
        (try? SecureRandom.bytes(8))?.reduce(0) { $0 << 8 | UInt64($1) }
            ?? UInt64(truncatingIfNeeded: Int.random(in: .min ... .max)))

    static func next() -> String {
        let id = mix(counter.add(1, ordering: .relaxed).newValue)
        return String(unsafeUninitializedCapacity: 16) { buffer in
            for i in 0..<16 {
                let nibble = UInt8(truncatingIfNeeded: id >> UInt64(60 - 4 * i)) & 0x0f
                buffer[i] = nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
            }
            return 16
        }
    }

    /// SplitMix64's output function.
    static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
