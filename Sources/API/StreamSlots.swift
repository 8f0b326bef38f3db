import Synchronization

/// Costly calls of a kind that a project may have under way at once on a replica: exports (a project's reads the whole
/// project, a statement a page, for as long as the client reads) and erasures. A stream's slot is held by the response
/// that streams: it is given back as the stream ends, or when the response is done with if it never started.
final class StreamSlots: Sendable {
    let perProject: Int
    private let held = Mutex<[String: Int]>([:])

    init(perProject: Int) { self.perProject = perProject }

    /// A slot of `project`'s, or nil when it has none left.
    func take(_ project: String) -> Slot? {
        let taken = held.withLock { held -> Bool in
            guard held[project, default: 0] < perProject else { return false }
            held[project, default: 0] += 1
            return true
        }
        return taken ? Slot(project: project, slots: self) : nil
    }

    /// A slot of `project`'s, or 429 RESOURCE_EXHAUSTED with `message` and `Retry-After`.
    func take(_ project: String, or message: String, retryAfter seconds: Int) throws -> Slot {
        guard let slot = take(project) else { throw APIError.exhausted(message, retryAfter: seconds) }
        return slot
    }

    /// Slots of `project` held now.
    func holding(_ project: String) -> Int { held.withLock { $0[project] ?? 0 } }

    fileprivate func give(_ project: String) {
        held.withLock { held in
            let left = held[project, default: 1] - 1
            held[project] = left > 0 ? left : nil
        }
    }

    /// A held slot: given back by ``release()`` (a stream, as it ends, before its last bytes reach the client, so that
    /// the client's next export finds it free), or when the last reference to it goes (a stream that never ran).
    final class Slot: Sendable {
        let project: String
        let slots: StreamSlots
        private let held = Atomic<Bool>(true)

        fileprivate init(project: String, slots: StreamSlots) {
            self.project = project
            self.slots = slots
        }

        func release() {
            if held.exchange(false, ordering: .relaxed) { slots.give(project) }
        }

        deinit { release() }
    }
}
