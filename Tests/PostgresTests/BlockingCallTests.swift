import Foundation
import Glibc
import Testing
import TokenRegistryTesting

@testable import Postgres

/// The threads that blocking calls hold: libpq's waits never on the cooperative pool, connects never on Dispatch's
/// global queue (docs/security.md, class 16). Both measure time: they run with the timing group, one at a time.
@Suite("Blocking calls", .enabled(if: TestDatabase.isAvailable))
struct BlockingCallTests {
    func withDatabase(_ body: (String) async throws -> Void) async throws { try await TestDatabase.with(body) }

    @Test func blockingCallsRunOffTheCooperativePool() async throws {
        try await withDatabase { url in
            let pool = PostgresPool(.init(conninfo: url, maxConnections: 8))
            // Open the eight connections first, so the measurement is of the sleeps, not of connecting (on a machine
            // busy with the rest of the suite, one warm-up round may finish a sleep before the last connection opens).
            for _ in 0..<20 {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<8 { group.addTask { try await pool.query("SELECT pg_sleep(0.05)") } }
                    try await group.waitForAll()
                }
                if pool.statistics.idle >= 8 { break }
            }
            #expect(pool.statistics.idle == 8)
            let start = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<8 { group.addTask { try await pool.query("SELECT pg_sleep(0.5)") } }
                try await group.waitForAll()
            }
            // Eight 0.5 s sleeps on two cooperative threads would take 2 s; on their own queues ~0.5 s (the margin is
            // for a machine busy with the rest of the suite).
            #expect(ContinuousClock.now - start < .milliseconds(1800))
        }
    }

    /// Connecting blocks a thread for as long as the server takes to answer. Twelve connects (more on a bigger machine) to a server that never
    /// answers (a listener that accepts nothing) must each wait on a thread of its own, delaying no timer: on
    /// Dispatch's global queue (as many threads as cores) they timed out a few at a time, and a 100 ms `Task.sleep`
    /// waited behind them for up to 2 s (docs/security.md, class 16).
    @Test func connectsThatHangDelayNoTimer() async throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(listener >= 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(listener, pointer, length) == 0 && listen(listener, 64) == 0
                    && getsockname(listener, pointer, &length) == 0
            }
        }
        #expect(bound)
        let port = Int(UInt16(bigEndian: address.sin_port))
        let started = ContinuousClock.now
        // More than Dispatch's global queue has threads (one a core), on any machine.
        let count = max(12, 4 * ProcessInfo.processInfo.activeProcessorCount)
        let connects = (0..<count).map { _ in
            Task {
                try? await PostgresConnection.connect(
                    "host=127.0.0.1 port=\(port) dbname=x user=x connect_timeout=2 sslmode=disable")
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        for _ in 0..<3 {
            let before = ContinuousClock.now
            try await Task.sleep(for: .milliseconds(100))
            let slept = ContinuousClock.now - before
            #expect(slept < .milliseconds(900), "a 100 ms sleep took \(slept) while the connects hung")
        }
        for connect in connects { #expect(await connect.value == nil) }
        // Twelve (or more) 2 s waits side by side: about 2 s; a few at a time, 6 s or more.
        let took = ContinuousClock.now - started
        #expect(took < .milliseconds(3500), "\(count) connects timing out after 2 s took \(took)")
    }
}
