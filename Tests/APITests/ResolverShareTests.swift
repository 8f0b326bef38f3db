import API
import Dispatch
import Registry
import Synchronization
import Testing

/// Name look-ups block a thread each for as long as the name's servers take, so they are bounded: 16 at once in the
/// process and 4 for one project (docs/security.md, class 14); the test below uses 8 and 2. One project whose names
/// never answer held all of the one bound there was, and every other project's deliveries failed their look-ups.
@Suite("Resolver shares")
struct ResolverShareTests {
    /// Look-ups of `*.slow.example` block until released, as a name whose servers never answer does; others answer.
    final class SlowNames: Sendable {
        let gate = DispatchSemaphore(value: 0)
        let blocked = Atomic<Int>(0)

        func lookUp(_ host: String) throws -> [IPAddress] {
            if host.hasSuffix(".slow.example") {
                blocked.add(1, ordering: .relaxed)
                gate.wait()
                throw RegistryError(.notFound, "timed out")
            }
            return [.v4(0x5db8_d822)]
        }
    }

    @Test func oneProjectsSlowNamesLeaveTheOthersTheirLookUps() async throws {
        let names = SlowNames()
        let slots = LookUpSlots(total: 8, perOwner: 2)
        let resolver = SystemResolver(slots: slots, lookUp: names.lookUp)
        // The attacker keeps as many slow look-ups in flight as it may.
        var held: [Task<Void, Never>] = []
        for n in 0..<2 {
            held.append(Task { _ = try? await resolver.resolve("n\(n).slow.example", for: "attacker") })
        }
        try await waitUntil { names.blocked.load(ordering: .relaxed) == 2 }
        // Its next one is refused at once; another project's look-up answers.
        let refused = await #expect(throws: RegistryError.self) {
            _ = try await resolver.resolve("n2.slow.example", for: "attacker")
        }
        #expect(refused?.kind == .unavailable)
        #expect(try await resolver.resolve("crm.example", for: "victim") == [.v4(0x5db8_d822)])
        // Only as many projects as share the process's eight could hold them all.
        for owner in ["b", "c", "d"] {
            for n in 0..<2 { held.append(Task { _ = try? await resolver.resolve("\(owner)\(n).slow.example", for: owner) }) }
        }
        try await waitUntil { names.blocked.load(ordering: .relaxed) == 8 }
        #expect(slots.inUse == 8)
        await #expect(throws: RegistryError.self) { _ = try await resolver.resolve("crm.example", for: "victim") }
        for _ in 0..<8 { names.gate.signal() }
        for task in held { await task.value }
        #expect(slots.inUse == 0)
        #expect(try await resolver.resolve("crm.example", for: "attacker") == [.v4(0x5db8_d822)])
    }

    private func waitUntil(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("timed out waiting")
                return
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// A project's deliveries start together (up to `deliveriesPerProject` a claim): its share of look-ups must hold
    /// them all, or its own notices are refused their look-ups and recorded as failures (the share was 2, of 4).
    @Test func aProjectsShareHoldsItsDeliveriesInFlight() {
        #expect(LookUpSlots.shared.perOwner >= DeletionPolicy().deliveriesPerProject)
        #expect(LookUpSlots.shared.total >= 4 * LookUpSlots.shared.perOwner)
    }
}
