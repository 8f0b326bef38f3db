import Dispatch
import Glibc
import Synchronization
import Testing

@testable import HTTP

/// The end of an event loop: what only its thread may touch is cleared before any job of it runs elsewhere.
@Suite("Event loop stop")
struct LoopStopTests {
    final class Flag: Sendable {
        let value = Atomic<Bool>(false)
        var isSet: Bool { value.load(ordering: .relaxed) }
    }

    /// A job left over at the stop runs on the after-stop queue, where a database connection's isolated deinit calls
    /// `forget(_:)`. It runs there before the loop's thread is done (the hook holds the loop until it has): it must
    /// find nothing of the loop's to change, and the socket watched before the stop must still be told, once.
    @Test func aJobLeftOverAtTheStopCannotTouchWhatTheLoopWatches() async throws {
        let server = HTTPServer(configuration: .init(host: "127.0.0.1", port: 0, eventLoops: 1)) { _ in
            HTTPResponse(status: 200)
        }
        try server.start()
        let loop = try #require(server.eventLoops.first)
        var pipeFDs: [Int32] = [0, 0]
        #expect(pipe(&pipeFDs) == 0)
        defer { for fd in pipeFDs { close(fd) } }
        let watched = pipeFDs[0]  // never readable: only the stop wakes its watcher
        let told = DispatchSemaphore(value: 0)
        await withTaskExecutorPreference(loop) {
            #expect(loop.isCurrent)
            loop.whenReady(watched, writable: false) { told.signal() }
        }
        let forgotten = DispatchSemaphore(value: 0)
        let ranOffTheLoop = Flag()
        EventLoop.stopHook = { stopping, step in
            guard stopping === loop else { return }
            switch step {
            case .closed:
                // Queued now, this job is left over: it runs once the loop hands its jobs off.
                Task(executorPreference: loop) {
                    ranOffTheLoop.value.store(!loop.isCurrent, ordering: .relaxed)
                    loop.forget(watched)
                    forgotten.signal()
                }
            case .handedOff:
                // As a forced stop's jobs may: the left-over job runs to its end before the loop goes on.
                _ = forgotten.wait(timeout: .now() + 5)
            }
        }
        defer { EventLoop.stopHook = nil }
        await server.shutdown(drainTimeout: 0)
        let ranOff = ranOffTheLoop.isSet
        #expect(ranOff, "the left-over job ran off the loop")
        #expect(told.wait(timeout: .now() + 5) == .success, "the watcher set before the stop is told at the stop")
        #expect(loop.watchers.isEmpty && loop.watched.isEmpty)
    }
}
