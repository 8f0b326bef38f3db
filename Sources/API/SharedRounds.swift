import Synchronization

/// Answers that are costly to compute, shared by key: one round of a key runs at a time, and callers within `ttl` of
/// a round's start get its answer (awaiting it if it still runs) instead of starting their own. A round still running
/// past `ttl` is joined, not doubled. A round that fails is not kept. The table holds only rounds that run or are
/// younger than `ttl`, so it stays as large as the keys asked about lately.
final class SharedRounds<Value: Sendable>: Sendable {
    struct Round {
        let started: ContinuousClock.Instant
        let task: Task<Value, any Error>
        var done = false
    }

    let ttl: Duration
    private let rounds = Mutex<[String: Round]>([:])

    init(ttl: Duration) { self.ttl = ttl }

    func value(for key: String, _ load: @escaping @Sendable () async throws -> Value) async throws -> Value {
        let round = rounds.withLock { rounds -> Round in
            let now = ContinuousClock.now
            if let round = rounds[key], !round.done || now - round.started < ttl { return round }
            rounds = rounds.filter { !$0.value.done || now - $0.value.started < ttl }
            let started = now
            let round = Round(
                started: started,
                task: Task {
                    defer { self.finished(key, started) }
                    return try await load()
                })
            rounds[key] = round
            return round
        }
        do {
            return try await round.task.value
        } catch {
            rounds.withLock { rounds in
                if rounds[key]?.started == round.started { rounds[key] = nil }
            }
            throw error
        }
    }

    private func finished(_ key: String, _ started: ContinuousClock.Instant) {
        rounds.withLock { rounds in
            if rounds[key]?.started == started { rounds[key]?.done = true }
        }
    }

    /// Drops `key`'s round: the next caller computes afresh (alongside it, if it still runs).
    func forget(_ key: String) { rounds.withLock { $0[key] = nil } }
}
