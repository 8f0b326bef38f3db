import API
import HTTP
import Synchronization
import Testing

/// The service group: start in order, stop in reverse, a drain deadline, a second shutdown that forces the stop.
@Suite("Service group")
struct ServiceGroupTests {
    final class Log: Sendable {
        private let lines = Mutex<[String]>([])
        func add(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }

    /// A part that logs what happens to it; its stop may hang until cancelled, its run may ignore the stop.
    final class Part: Service {
        let name: String
        let log: Log
        let failsToStart: Bool
        let stopHangs: Bool
        let runIgnoresStop: Bool
        private let stopped = Gate()

        init(_ name: String, log: Log, failsToStart: Bool = false, stopHangs: Bool = false, runIgnoresStop: Bool = false) {
            self.name = name
            self.log = log
            self.failsToStart = failsToStart
            self.stopHangs = stopHangs
            self.runIgnoresStop = runIgnoresStop
        }

        struct StartFailed: Error {}

        func start() async throws {
            log.add("start \(name)")
            if failsToStart { throw StartFailed() }
        }

        func run() async {
            if runIgnoresStop { await Gate().wait() } else { await stopped.wait() }
            log.add("ended \(name)\(Task.isCancelled ? " (cancelled)" : "")")
        }

        func stop(deadline: ContinuousClock.Instant) async {
            log.add("stop \(name)")
            if stopHangs {
                await Gate().wait()
                log.add("stop \(name) \(Task.isCancelled ? "cancelled" : "returned")")
            }
            stopped.open()
        }
    }

    @Test func startsInOrderAndStopsInReverseEachAfterTheLaterOnesEnded() async throws {
        let log = Log()
        let group = ServiceGroup(["a", "b", "c"].map { Part($0, log: log) }, drain: .seconds(5), logger: Logger(level: .error))
        async let running: Void = group.run()
        #expect(await group.waitUntilStarted())
        group.shutdown()
        try await running
        #expect(log.all == ["start a", "start b", "start c", "stop c", "ended c", "stop b", "ended b", "stop a", "ended a"])
    }

    @Test func aPartThatFailsToStartStopsThoseBeforeItAndNoneAfter() async throws {
        let log = Log()
        let group = ServiceGroup(
            [Part("a", log: log), Part("b", log: log), Part("c", log: log, failsToStart: true), Part("d", log: log)],
            drain: .seconds(5), logger: Logger(level: .error))
        await #expect(throws: Part.StartFailed.self) { try await group.run() }
        #expect(!(await group.waitUntilStarted()))
        #expect(log.all == ["start a", "start b", "start c", "stop b", "stop a"])
    }

    @Test func aPartThatDoesNotStopIsCancelledAtTheDrainDeadline() async throws {
        let log = Log()
        let group = ServiceGroup(
            [Part("a", log: log), Part("stuck", log: log, runIgnoresStop: true)], drain: .milliseconds(300),
            logger: Logger(level: .error))
        async let running: Void = group.run()
        #expect(await group.waitUntilStarted())
        let asked = ContinuousClock.now
        group.shutdown()
        try await running
        let took = ContinuousClock.now - asked
        // Bounded by the deadline, not by the part (a loaded machine may add seconds, never the part's forever).
        #expect(took >= .milliseconds(300) && took < .seconds(60), "\(took)")
        // The parts before it stop only once it has ended: what they hold (the pools) outlives it.
        let ended = try #require(log.all.firstIndex(of: "ended stuck (cancelled)"))
        let stopped = try #require(log.all.firstIndex(of: "stop a"), "the parts before it still stop")
        #expect(ended < stopped)
    }

    @Test func aSecondShutdownForcesAStopThatHangs() async throws {
        let log = Log()
        let group = ServiceGroup(
            [Part("pools", log: log), Part("http", log: log, stopHangs: true)], drain: .seconds(600),
            logger: Logger(level: .error))
        async let running: Void = group.run()
        #expect(await group.waitUntilStarted())
        group.shutdown()
        let asked = ContinuousClock.now
        while !log.all.contains("stop http") && ContinuousClock.now - asked < .seconds(30) {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(log.all.last == "stop http", "the graceful stop is under way, and hangs")
        let forced = ContinuousClock.now
        group.shutdown()
        try await running
        #expect(ContinuousClock.now - forced < .seconds(60), "long before the 600 s drain deadline")
        #expect(log.all.contains("stop http cancelled"))
        #expect(log.all.contains("stop pools"), "the parts before it are still stopped, at once")
    }
}
