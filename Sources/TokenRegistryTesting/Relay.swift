import Registry

extension Jobs {
    /// Relays the change feed until `done` holds, for at most `rounds` rounds 50 ms apart. The relay moves an event
    /// only once every transaction older than it has ended, on the whole cluster (other tests' too, and a test's own
    /// second session), so one round that moves nothing does not mean nothing is left.
    public func relay(rounds: Int = 200, until done: () async throws -> Bool) async throws {
        for _ in 0..<rounds {
            _ = try await relayEvents()
            if try await done() { return }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}
