import Synchronization
import Testing

@testable import API

/// Costly answers shared by key (the hygiene report): one round a key at a time, kept for its age, a failure not kept.
@Suite("Shared rounds")
struct SharedRoundsTests {
    @Test func concurrentCallersShareOneRoundAndFailuresAreNotKept() async throws {
        let rounds = SharedRounds<Int>(ttl: .seconds(30))
        final class Counter: Sendable { let loads = Atomic<Int>(0) }
        let counter = Counter()
        let answers = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    try await rounds.value(for: "p") {
                        try await Task.sleep(for: .milliseconds(50))
                        return counter.loads.add(1, ordering: .relaxed).newValue
                    }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(counter.loads.load(ordering: .relaxed) == 1 && Set(answers) == [1])
        // Another key is its own round; a forgotten key is computed afresh.
        #expect(try await rounds.value(for: "q") { 7 } == 7)
        rounds.forget("p")
        #expect(try await rounds.value(for: "p") { 2 } == 2)
        // A round that fails is not kept: the next caller tries again.
        struct Failed: Error {}
        await #expect(throws: Failed.self) { _ = try await rounds.value(for: "r") { throw Failed() } }
        #expect(try await rounds.value(for: "r") { 3 } == 3)
    }

    @Test func aRoundOlderThanItsAgeIsComputedAgain() async throws {
        let ttl: Duration = .milliseconds(500)
        let rounds = SharedRounds<Int>(ttl: ttl)
        let started = ContinuousClock.now
        #expect(try await rounds.value(for: "p") { 1 } == 1)
        let again = try await rounds.value(for: "p") { 2 }
        // Within its age the round is reused (a loaded machine may take longer than the age between the two calls).
        if ContinuousClock.now - started < ttl { #expect(again == 1) }
        try await Task.sleep(for: ttl + .milliseconds(100))
        #expect(try await rounds.value(for: "p") { 3 } == 3)
    }

    /// A round still running past its age is joined, not run twice beside itself (a count slower than the age, polled).
    @Test func aRoundStillRunningPastItsAgeIsJoined() async throws {
        let rounds = SharedRounds<Int>(ttl: .milliseconds(10))
        let slow = Task {
            try await rounds.value(for: "p") {
                try await Task.sleep(for: .milliseconds(300))
                return 1
            }
        }
        try await Task.sleep(for: .milliseconds(100))
        #expect(try await rounds.value(for: "p") { 2 } == 1)
        #expect(try await slow.value == 1)
    }
}
