import Crypto
import Foundation
import HTTP
import Registry

/// The HTTP server as a service: bound at start, drained at stop.
final class HTTPService: Service {
    let name = "http"
    let server: HTTPServer
    private let stopped = Gate()

    init(server: HTTPServer) { self.server = server }

    func start() async throws {
        _ = try server.start()
    }

    func run() async { await stopped.waitUninterruptibly() }

    /// Stops accepting and lets in-flight requests finish until `deadline` (at once, when cancelled).
    func stop(deadline: ContinuousClock.Instant) async {
        await server.shutdown(deadline: deadline)
        stopped.open()
    }
}

/// The database pools: placed on the HTTP event loops once those run, closed after the server has drained (the
/// group stops services in reverse, and this one comes before the server).
final class PoolsService: Service {
    let name = "database"
    let http: HTTPService
    let place: @Sendable ([EventLoop]) -> Void
    let close: @Sendable () -> Void
    private let stopped = Gate()

    init(http: HTTPService, place: @escaping @Sendable ([EventLoop]) -> Void, close: @escaping @Sendable () -> Void) {
        self.http = http
        self.place = place
        self.close = close
    }

    func run() async {
        place(http.server.eventLoops)
        await stopped.waitUninterruptibly()
    }

    func stop(deadline: ContinuousClock.Instant) async {
        close()
        stopped.open()
    }
}

/// Work repeated every `interval` until stopped: a stop cancels the round under way (its work is claimed with row
/// or advisory locks, so another replica, or the next start, takes it up).
final class RepeatingService: Service {
    let name: String
    let interval: Duration
    let round: @Sendable () async -> Void
    private let stopping = Gate()

    init(name: String, every interval: Duration, _ round: @escaping @Sendable () async -> Void) {
        self.name = name
        self.interval = interval
        self.round = round
    }

    func run() async {
        while !stopping.isOpen && !Task.isCancelled {
            await withTaskGroup(of: Void.self) { race in
                race.addTask { await self.round() }
                race.addTask { await self.stopping.wait() }
                await race.next()
                race.cancelAll()
            }
            await stopping.wait(until: .now + interval)
        }
    }

    func stop(deadline: ContinuousClock.Instant) async { stopping.open() }
}

extension RepeatingService {
    /// The background jobs (``Jobs/run()``), every `interval`, with what each round reports logged and counted.
    static func jobs(_ jobs: Jobs, every interval: Duration, metrics: Metrics, logger: Logger) -> RepeatingService {
        RepeatingService(name: "jobs", every: interval) {
            do {
                let report = try await jobs.run()
                metrics.record(report)
                for (job, error) in report.failed.sorted(by: { $0.key < $1.key }) {
                    logger.warning("job failed", [("job", .string(job)), ("error", .string(String(error.prefix(500))))])
                }
                for (job, count) in report.unitFailures.sorted(by: { $0.key < $1.key }) {
                    logger.warning("job units failed", [("job", .string(job)), ("count", .number(String(count)))])
                }
                for head in report.auditHeads {
                    logger.info(
                        "audit chain head",
                        [
                            ("projectId", .string(head.projectID)), ("seq", .string(String(head.seq))),
                            ("hash", .string(Hex.encode(head.hash))), ("chained", .number(String(head.chained))),
                        ])
                }
                for (job, reason) in report.skipped.sorted(by: { $0.key < $1.key }) {
                    logger.warning(
                        "job skipped",
                        [
                            ("job", .string(job)), ("reason", .string(reason)),
                            ("clockSkewSeconds", .number(String(format: "%.3f", report.clockSkewSeconds ?? 0))),
                        ])
                }
            } catch is CancellationError {
            } catch {
                if !Task.isCancelled { logger.warning("job run failed", [("error", .string(String(describing: error)))]) }
            }
        }
    }

    /// The change-feed relay (``Jobs/relayEvents()``), every 250 ms.
    static func relay(_ jobs: Jobs) -> RepeatingService {
        RepeatingService(name: "feed relay", every: .milliseconds(250)) { _ = try? await jobs.relayEvents() }
    }
}
