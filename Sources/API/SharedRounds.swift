import Synchronization

/// Answers that are costly to compute, shared by key: callers within `ttl` of a round's start get that round's
/// answer (awaiting it if it still runs) instead of starting their own. A round that fails is not kept. The table
/// holds only rounds younger than `ttl`, so it stays as large as the keys asked about lately.
final class SharedRounds<Value: Sendable>: Sendable {
    typealias Round = (started: ContinuousClock.Instant, task: Task<Value, any Error>)
    let ttl: Duration
    private let rounds = Mutex<[String: Round]>([:])

    init(ttl: Duration) { self.ttl = ttl }

    func value(for key: String, _ load: @escaping @Sendable () async throws -> Value) async throws -> Value {
        let round = rounds.withLock { rounds -> Round in
            let now = ContinuousClock.now
            if let round = rounds[key], now - round.started < ttl { return round }
            rounds = rounds.filter { now - $0.value.started < ttl }
            let round = (started: now, task: Task { try await load() })
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

    /// Drops `key`'s round: the next caller computes afresh.
    func forget(_ key: String) { rounds.withLock { $0[key] = nil } }
}
