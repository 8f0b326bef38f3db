import Synchronization

/// A small cache of look-ups whose entries expire (monotonic time: an entry's age has nothing to do with the
/// injectable domain clock). A cached miss is remembered too. At `capacity` entries it starts again, empty: the keys
/// in use come back at their next request.
final class TTLCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct Entry: Sendable {
        let value: Value?
        let expires: ContinuousClock.Instant
    }

    private let entries = Mutex<[Key: Entry]>([:])
    private let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    /// The value cached for `key` (itself nil for a cached miss), or nil when nothing current is cached.
    func lookup(_ key: Key) -> Value?? {
        entries.withLock { entries in
            guard let entry = entries[key], entry.expires > .now else { return nil }
            return .some(entry.value)
        }
    }

    /// Remembers `value` (nil for a miss) for `ttl` seconds.
    func store(_ key: Key, _ value: Value?, ttl: Double) {
        entries.withLock { entries in
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            entries[key] = Entry(value: value, expires: .now + .seconds(ttl))
        }
    }

    /// Forgets `key`.
    func remove(_ key: Key) {
        _ = entries.withLock { $0.removeValue(forKey: key) }
    }
}
