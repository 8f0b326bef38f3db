import Foundation
import Glibc
import Synchronization

/// What the server calls for each request. It must always return a response; errors are the caller's to map.
public typealias HTTPHandler = @Sendable (HTTPRequest) async -> HTTPResponse

/// Tried first, on the event loop, for each request: a response when the request can be answered without
/// suspending (no database, no other task), nil to hand it to the ``HTTPHandler``. It must be quick: the loop's
/// other connections wait while it runs. A request answered here costs no task and no executor hop.
public typealias HTTPImmediateHandler = @Sendable (HTTPRequest) -> HTTPResponse?

/// An HTTP/1.1 server: one epoll event loop per core, all on one shared listener (`EPOLLEXCLUSIVE` wakes one loop
/// per connection; without `SO_REUSEPORT`, so a second instance on the same port fails to bind).
///
/// ```swift
/// let server = HTTPServer(configuration: .init(port: 0)) { request in HTTPResponse(status: 200) }
/// let port = try server.start()
/// ...
/// await server.shutdown()   // stop accepting, finish in-flight requests, close
/// ```
public final class HTTPServer: Sendable {
    /// Whether `host` is an address the server can listen on (see ``Configuration/host``).
    public static func canListen(on host: String) -> Bool { SocketAddress(host: host, port: 0) != nil }

    public struct Configuration: Sendable {
        /// An IPv4 or IPv6 address (`0.0.0.0`, `127.0.0.1`, `::`, `::1`, `[::1]`) or `localhost`; an IPv6 listener
        /// takes IPv4 connections too.
        public var host: String
        public var port: Int
        /// Event loops (threads); defaults to the number of cores.
        public var eventLoops: Int
        public var limits: HTTPLimits
        /// How long a client may take to send a whole request once it has started (408, then close).
        public var requestTimeoutMillis: UInt64
        /// How long an idle keep-alive connection stays open.
        public var idleTimeoutMillis: UInt64
        /// Open connections beyond which new ones are answered 503 and closed.
        public var maxConnections: Int
        /// Open connections one client address may hold (0: no limit); beyond it, 503 and close.
        public var maxConnectionsPerAddress = 0
        /// The key a client's address (without its port) counts under in ``maxConnectionsPerAddress``: the address
        /// itself unless set (the API counts an IPv6 client by its /64, as its rate limits do).
        public var connectionLimitKey: @Sendable (String) -> String = { $0 }
        /// Answers a connection may have written but not yet sent: at this bound it stops reading and dispatching
        /// requests (backpressure) until its client reads.
        public var maxPendingOutputBytes = 256 * 1024
        /// Answers not yet sent, over every connection, beyond which a connection with unsent output dispatches no
        /// further request until it has sent it all: clients that do not read cannot together hold the process's
        /// memory (each is also bound by the write timeout).
        public var maxPendingOutputTotal = 64 * 1024 * 1024
        /// The process's budget for requests larger than 64 KiB as they arrive: each takes its share (its declared
        /// length, or the largest body for a chunked one) before reading past 64 KiB, and waits without reading until
        /// there is room. Slow uploads of large bodies cannot together hold the process's memory (each is also bound
        /// by the request timeout); smaller requests never wait.
        public var maxBufferedInputTotal = 64 * 1024 * 1024
        /// A connection with unsent output must send at least ``minBytesPerWriteTimeout`` (or all of it) in each of
        /// these periods, or it is closed: a client that reads a byte at a time cannot hold it open.
        public var writeTimeoutMillis: UInt64 = 10_000
        public var minBytesPerWriteTimeout = 16 * 1024
        public var backlog: Int32

        public init(
            host: String = "0.0.0.0", port: Int = 8080, eventLoops: Int = ProcessInfo.processInfo.activeProcessorCount,
            limits: HTTPLimits = HTTPLimits(), requestTimeoutMillis: UInt64 = 10_000,
            idleTimeoutMillis: UInt64 = 75_000, maxConnections: Int = 16_384, backlog: Int32 = 4096
        ) {
            self.host = host
            self.port = port
            self.eventLoops = max(1, eventLoops)
            self.limits = limits
            self.requestTimeoutMillis = requestTimeoutMillis
            self.idleTimeoutMillis = idleTimeoutMillis
            self.maxConnections = maxConnections
            self.backlog = backlog
        }
    }

    /// State shared by the event loops.
    final class Core: Sendable {
        let configuration: Configuration
        let handler: HTTPHandler
        let immediate: HTTPImmediateHandler?
        let errorResponse: @Sendable (Int, String) -> HTTPResponse
        let logger: @Sendable (String) -> Void
        let openConnections = Atomic<Int>(0)
        let inFlightRequests = Atomic<Int>(0)
        let refusedConnections = Atomic<Int>(0)
        /// Bytes written by handlers and not yet sent, over every connection.
        let pendingOutputBytes = Atomic<Int>(0)
        /// Input held by requests on their way in (unparsed bytes and bodies so far), over every connection, as each
        /// last counted it.
        let heldInputBytes = Atomic<Int>(0)
        /// The input budget's shares held by requests larger than the allowance (``Configuration/maxBufferedInputTotal``).
        let reservedInputBytes = Atomic<Int>(0)

        /// Takes `bytes` more of the input budget for a request that holds `holding` already; false when they do not
        /// fit (one request always does, alone).
        func reserveInput(_ bytes: Int, holding: Int) -> Bool {
            var current = reservedInputBytes.load(ordering: .relaxed)
            while true {
                guard current == holding || current + bytes <= configuration.maxBufferedInputTotal else { return false }
                let (exchanged, original) = reservedInputBytes.compareExchange(
                    expected: current, desired: current + bytes, ordering: .relaxed)
                if exchanged { return true }
                current = original
            }
        }

        func releaseInput(_ bytes: Int) {
            if bytes > 0 { reservedInputBytes.subtract(bytes, ordering: .relaxed) }
        }
        /// Connections closed because their client did not read their answers in time.
        let writeTimeouts = Atomic<Int>(0)
        let parseErrors = Mutex<[Int: Int]>([:])
        /// Open connections per client address, when ``Configuration/maxConnectionsPerAddress`` is set.
        let perAddress = Mutex<[String: Int]>([:])

        init(
            configuration: Configuration, handler: @escaping HTTPHandler, immediate: HTTPImmediateHandler?,
            errorResponse: @escaping @Sendable (Int, String) -> HTTPResponse,
            logger: @escaping @Sendable (String) -> Void
        ) {
            self.configuration = configuration
            self.handler = handler
            self.immediate = immediate
            self.errorResponse = errorResponse
            self.logger = logger
        }

        func log(_ message: String) { logger(message) }

        func countParseError(status: Int) { parseErrors.withLock { $0[status, default: 0] += 1 } }

        /// The key the client at `remote` (`address:port`) counts under in the per-address limit.
        func addressKey(of remote: String) -> String { configuration.connectionLimitKey(HTTPRequest.host(of: remote)) }

        /// Counts a new connection from `remote`; false when its address already holds its share.
        func admit(_ remote: String) -> Bool {
            let cap = configuration.maxConnectionsPerAddress
            guard cap > 0 else { return true }
            let address = addressKey(of: remote)
            return perAddress.withLock { counts in
                guard counts[address, default: 0] < cap else { return false }
                counts[address, default: 0] += 1
                return true
            }
        }

        func release(_ remote: String) {
            guard configuration.maxConnectionsPerAddress > 0 else { return }
            let address = addressKey(of: remote)
            perAddress.withLock { counts in
                guard let n = counts[address] else { return }
                counts[address] = n > 1 ? n - 1 : nil
            }
        }
    }

    private let core: Core
    private let loops = Mutex<[EventLoop]>([])
    private let boundPort = Atomic<Int>(0)
    private let listener = Atomic<Int32>(-1)

    /// - Parameters:
    ///   - errorResponse: renders protocol errors (400, 408, 413, 414, 431, 503 …) that never reach `handler`.
    ///   - logger: receives rare server-level messages (accept failures).
    ///   - immediate: answers, on the event loop, the requests that need no suspension (see ``HTTPImmediateHandler``).
    public init(
        configuration: Configuration,
        errorResponse: @escaping @Sendable (Int, String) -> HTTPResponse = HTTPServer.defaultErrorResponse,
        logger: @escaping @Sendable (String) -> Void = { _ in },
        immediate: HTTPImmediateHandler? = nil,
        handler: @escaping HTTPHandler
    ) {
        core = Core(
            configuration: configuration, handler: handler, immediate: immediate, errorResponse: errorResponse,
            logger: logger)
    }

    /// A Google-style JSON error body: `{"error":{"code","message","status"}}`.
    public static let defaultErrorResponse: @Sendable (Int, String) -> HTTPResponse = { status, message in
        let canonical = CanonicalStatus.code(for: status)
        var escaped = ""
        for c in message.unicodeScalars {
            switch c {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            default: escaped.unicodeScalars.append(c.value < 0x20 ? " " : c)
            }
        }
        return HTTPResponse(
            status: status, contentType: "application/json",
            body: "{\"error\":{\"code\":\(status),\"message\":\"\(escaped)\",\"status\":\"\(canonical)\"}}")
    }

    /// The port the server listens on (useful after binding port 0).
    public var port: Int { boundPort.load(ordering: .relaxed) }

    /// Connections open now.
    public var openConnections: Int { core.openConnections.load(ordering: .relaxed) }

    /// Requests handed to the handler and not yet answered.
    public var inFlightRequests: Int { core.inFlightRequests.load(ordering: .relaxed) }

    /// Connections refused because `maxConnections` was reached.
    public var refusedConnections: Int { core.refusedConnections.load(ordering: .relaxed) }
    /// Bytes of answers written and not yet sent, over every connection (bounded per connection by
    /// ``Configuration/maxPendingOutputBytes`` and one answer).
    public var pendingOutputBytes: Int { core.pendingOutputBytes.load(ordering: .relaxed) }
    /// Input held by requests on their way in (unparsed bytes and bodies so far), over every connection.
    public var heldInputBytes: Int { core.heldInputBytes.load(ordering: .relaxed) }
    /// The input budget held by requests larger than 64 KiB on their way in.
    public var reservedInputBytes: Int { core.reservedInputBytes.load(ordering: .relaxed) }
    /// Connections closed by the write timeout.
    public var writeTimeouts: Int { core.writeTimeouts.load(ordering: .relaxed) }

    /// Protocol errors answered by the server itself, by status.
    public var protocolErrors: [Int: Int] { core.parseErrors.withLock { $0 } }

    /// The event loops, once started: other sockets may be watched on them (``EventLoop/whenReady(_:writable:_:)``).
    public var eventLoops: [EventLoop] { loops.withLock { $0 } }

    /// Binds the listeners and starts the event loops.
    ///
    /// - Returns: the bound port.
    /// - Throws: ``SocketError`` when the address cannot be bound.
    @discardableResult
    public func start() throws -> Int {
        Socket.raiseFileLimit()
        // Sends use MSG_NOSIGNAL, but other libraries in the process (libcurl for outgoing notices, pipes to child
        // processes) may write to a closed peer; a process serving clients must never die of SIGPIPE.
        signal(SIGPIPE, SIG_IGN)
        let configuration = core.configuration
        let first = try Socket.listen(
            host: configuration.host, port: configuration.port, backlog: configuration.backlog)
        boundPort.store(first.port, ordering: .relaxed)
        listener.store(first.fd, ordering: .relaxed)
        var created: [EventLoop] = []
        for _ in 0..<configuration.eventLoops { created.append(try EventLoop(core: core, listenFD: first.fd)) }
        loops.withLock { $0 = created }
        for (i, loop) in created.enumerated() {
            let thread = Thread { loop.run() }
            thread.name = "http-loop-\(i)"
            thread.start()
        }
        return first.port
    }

    /// Stops accepting, lets in-flight requests finish and closes idle connections; after `drainTimeout` seconds, or
    /// at once when the calling task is cancelled (a forced stop), closes whatever is left. Returns once every loop's
    /// thread has stopped.
    public func shutdown(drainTimeout: Double = 10) async {
        await shutdown(deadline: .now + .milliseconds(Int64(max(0, drainTimeout) * 1000)))
    }

    /// ``shutdown(drainTimeout:)`` with the drain ending at `deadline`.
    public func shutdown(deadline: ContinuousClock.Instant) async {
        let all = loops.withLock { $0 }
        for loop in all { loop.post(.drain) }
        // Each loop lets go of the listener on its next turn; only then may it close (no loop may accept on a
        // descriptor number that something else reuses).
        for loop in all { await loop.releasedListener.waitUninterruptibly() }
        let fd = listener.exchange(-1, ordering: .relaxed)
        if fd >= 0 { close(fd) }
        for loop in all { await loop.finished.wait(until: deadline) }
        for loop in all where !loop.isFinished { loop.post(.stop) }
        for loop in all { await loop.finished.waitUninterruptibly() }
    }
}
