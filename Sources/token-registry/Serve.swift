import API
import CLinuxShims
import Dispatch
import Foundation
import Registry

/// `token-registry serve`: migrate, start, run until SIGTERM/SIGINT, drain, exit 0.
enum Serve {
    static func run(_ arguments: Arguments) async throws -> Int32 {
        if arguments.wantsHelp {
            print("token-registry serve — run the HTTP service. Configuration from the environment (README.md).")
            return 0
        }
        try arguments.allow([])
        let configuration = try Configuration.fromEnvironment()
        // Responses of a topic page are megabytes, made and freed once per page. By default glibc serves such blocks
        // with mmap, or trims the heap after them, and every page then faults its memory in again (a fifth of the
        // stream's CPU in a profile). Keep freed memory for reuse instead: the process stays at its high-water mark.
        _ = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024)
        _ = mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024)
        // Request lines are gathered and written every 64 KiB or second (LogBuffer); shutdown writes the rest.
        let logger = Logger.buffered(level: configuration.logLevel)
        defer { logger.close() }
        // Signals are caught from the start: one that arrives while the cluster starts or migrations run is acted
        // on as soon as the service is up (it drains at once and stops a cluster it started), never lost.
        let (signals, continuation) = AsyncStream.makeStream(of: Int32.self)
        // On a queue of their own, not the global one, whose threads blocked calls may hold (docs/security.md, class 16).
        let signalQueue = DispatchQueue(label: "signals")
        let sources = [SIGTERM, SIGINT].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: signalQueue)
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            return source
        }
        try await CommandDatabase.with(configuration, logger: logger) { database in
            logger.info("migrating")
            let applied = try await database.migrate()
            if !applied.isEmpty { logger.info("migrations applied", [("versions", .array(applied.map { .int($0) }))]) }
            let app = try await database.application(configuration: configuration, logger: logger)
            // The first signal drains, a second one forces the stop (``ServiceGroup``).
            try await app.run(until: signals)
            // The sources must live until here: released early, they are cancelled and the (ignored) signal is lost.
            // Cancelling them is a real use, which an optimised build cannot drop the way it drops `_ = sources`.
            for source in sources { source.cancel() }
        }
        return 0
    }
}
