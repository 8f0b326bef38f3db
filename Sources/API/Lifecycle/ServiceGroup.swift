import HTTP
import Synchronization

/// A part of the running service with a life of its own: the HTTP server, the jobs loop, the feed relay, the
/// database pools. A ``ServiceGroup`` starts them in order and stops them in reverse.
public protocol Service: Sendable {
    var name: String { get }
    /// Brings the service up; returns once it does its work (the listener bound). Every service's `start()` has
    /// returned before any `run()` begins.
    func start() async throws
    /// Does the service's work until ``stop(deadline:)`` (or cancellation, a forced stop); returns once it has stopped.
    func run() async
    /// Asks ``run()`` to finish: work in hand may go on until `deadline`, or until the calling task is cancelled.
    func stop(deadline: ContinuousClock.Instant) async
}

extension Service {
    public func start() async throws {}
}

/// Runs services with structured concurrency: each one's ``Service/run()`` is a child task of ``run()``, which
/// returns only once all have stopped.
///
/// ``shutdown()`` stops them gracefully, in the reverse of their order, each given until a shared drain deadline;
/// a second ``shutdown()`` (a second signal), or the deadline passing, forces the rest: their stops run cancelled,
/// which ends them at once.
public final class ServiceGroup: Sendable {
    let services: [any Service]
    let drain: Duration
    let logger: Logger
    let whenStopping: @Sendable () -> Void
    private let requested = Mutex(0)
    private let graceful = Gate()
    private let forced = Gate()
    private let started = Gate()

    /// - Parameter whenStopping: runs once a shutdown is asked for, before any service stops (readiness turns false).
    public init(
        _ services: [any Service], drain: Duration, logger: Logger, whenStopping: @escaping @Sendable () -> Void = {}
    ) {
        self.services = services
        self.drain = drain
        self.logger = logger
        self.whenStopping = whenStopping
    }

    /// Asks the group to stop: the first call gracefully (``whenStopping`` runs before it returns), a later one by
    /// force.
    public func shutdown() {
        let count = requested.withLock { n -> Int in
            n += 1
            return n
        }
        if count == 1 {
            whenStopping()
            graceful.open()
        } else {
            forced.open()
        }
    }

    /// Waits until every service has started (true), or the group failed to start or stopped first (false).
    public func waitUntilStarted() async -> Bool {
        await started.wait()
        return startedAll.withLock { $0 }
    }

    private let startedAll = Mutex(false)

    /// Starts the services in order, runs them until ``shutdown()``, then stops them in reverse.
    ///
    /// - Throws: the error of a service that failed to start (those started before it are stopped first).
    public func run() async throws {
        var up: [any Service] = []
        do {
            for service in services {
                try await service.start()
                up.append(service)
            }
        } catch {
            logger.error("service failed to start", [("error", .string(String(describing: error)))])
            started.open()
            await stop(up, finished: nil)
            throw error
        }
        startedAll.withLock { $0 = true }
        started.open()
        let finished = up.map { _ in Gate() }
        let cancel = up.map { _ in Gate() }
        await withTaskGroup(of: Void.self) { group in
            for index in up.indices {
                let (service, done, cancelled) = (up[index], finished[index], cancel[index])
                group.addTask {
                    // The part's run, cancelled on its own when it outlasts the drain (its `cancel` gate opens).
                    await withTaskGroup(of: Void.self) { part in
                        part.addTask { await service.run() }
                        part.addTask { await cancelled.wait() }
                        await part.next()
                        part.cancelAll()
                    }
                    done.open()
                }
            }
            await graceful.wait()
            // Cancelled rather than asked: the stop still begins by turning readiness false.
            if requested.withLock({ $0 }) == 0 { whenStopping() }
            await stop(up, finished: finished, cancel: cancel)
            group.cancelAll()
        }
    }

    /// Stops `services` in reverse order, each within the drain deadline; one that has not ended by then is cancelled,
    /// and the next (earlier) one is stopped only once it has ended, so what it uses (the pools) outlives it. A forced
    /// stop cancels the sequence: the stops still to come run cancelled (at once), and no part is waited for.
    private func stop(_ services: [any Service], finished: [Gate]?, cancel: [Gate] = []) async {
        let deadline = ContinuousClock.now + drain
        await withTaskGroup(of: Void.self) { race in
            race.addTask {
                for index in services.indices.reversed() {
                    let service = services[index]
                    await service.stop(deadline: deadline)
                    guard let finished, await !finished[index].wait(until: deadline) else { continue }
                    self.logger.warning(
                        "service did not stop by the drain deadline; cancelled", [("service", .string(service.name))])
                    cancel[index].open()
                    await finished[index].wait()
                }
            }
            race.addTask {
                if await self.forced.wait() {
                    self.logger.warning("second signal: stopping now")
                }
            }
            await race.next()
            race.cancelAll()
            await race.waitForAll()
        }
    }
}
