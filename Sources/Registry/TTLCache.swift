import Synchronization

/// A small cache of look-ups whose entries expire (monotonic time: an entry's age has nothing to do with the
/// injectable domain clock). A cached miss is remembered too, apart from the values: a table of either kind that
/// reaches its capacity starts again, empty (the keys in use come back at their next request). Misses are what a
/// caller sending random keys makes, so they have the smaller table of their own; before, 50,000 random server keys
/// emptied the one table and sent every tenant's look-ups back to the database.
final class TTLCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct Entry<V: Sendable>: Sendable {
        let value: V
        let expires: ContinuousClock.Instant
    }

    private struct Tables: Sendable {
        var found: [Key: Entry<Value>] = [:]
        var missing: [Key: Entry<Void>] = [:]
    }

    private let tables = Mutex(Tables())
    private let capacity: Int
    private let missCapacity: Int

    init(capacity: Int) {
        self.capacity = capacity
        missCapacity = max(16, capacity / 10)
    }

    /// The value cached for `key` (itself nil for a cached miss), or nil when nothing current is cached.
    func lookup(_ key: Key) -> Value?? {
        tables.withLock { t in
            let now = ContinuousClock.now
            if let entry = t.found[key], entry.expires > now { return .some(entry.value) }
            if let entry = t.missing[key], entry.expires > now { return .some(nil) }
            return nil
        }
    }

    /// Remembers `value` (nil for a miss) for `ttl` seconds.
    func store(_ key: Key, _ value: Value?, ttl: Double) {
        tables.withLock { t in
            let expires = ContinuousClock.now + .seconds(ttl)
            if let value {
                t.missing[key] = nil
                if t.found.count >= capacity { t.found.removeAll(keepingCapacity: true) }
                t.found[key] = Entry(value: value, expires: expires)
            } else {
                t.found[key] = nil
                if t.missing.count >= missCapacity { t.missing.removeAll(keepingCapacity: true) }
                t.missing[key] = Entry(value: (), expires: expires)
            }
        }
    }

    /// Forgets `key`.
    func remove(_ key: Key) {
        tables.withLock { t in
            t.found[key] = nil
            t.missing[key] = nil
        }
    }

    /// Entries held, values and misses: for tests.
    var counts: (found: Int, missing: Int) { tables.withLock { ($0.found.count, $0.missing.count) } }
}
