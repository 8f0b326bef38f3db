/// One connection's state, with no I/O: the phase it is in, its timers, and what the loop must do at each event.
/// The event loop reads, parses, writes and closes; every decision about *when* (dispatch the next request, keep the
/// connection, linger, time out) is a transition here, unit-tested without sockets (`ConnectionStateTests`).
///
/// ```
///            bytes             request parsed            answer (keep-alive)
///   idle ──────────▶ reading ─────────────────▶ handling ──────────────────▶ idle
///     ▲                 │ error, timeout (408)      │ answer (close), draining
///     │                 ▼                           ▼
///     └──────────── closing ◀───────────────────────┘
///                       │ written: input pending or peer open ─▶ lingering ─▶ closed
///                       └ written: nothing more to read ─────────────────────▶ closed
/// ```
struct ConnectionState {
    /// How to write the answer of the request with its handler.
    struct InFlight: Equatable {
        var version: HTTPVersion
        var keepAlive: Bool
        var isHead: Bool
    }

    enum Phase: Equatable {
        /// Between requests: nothing of a request buffered; the idle timer runs from the last complete answer.
        case idle
        /// A request's bytes are arriving (its head, then its body): the request timer runs from its first byte.
        case reading(since: UInt64)
        /// A request is with its handler; the next one waits, so answers keep request order.
        case handling(InFlight)
        /// The head of a streamed answer is sent; its body is on its way. Nothing else is dispatched meanwhile.
        case streaming(InFlight, keepAlive: Bool)
        /// The answer that ends the connection is queued: once it is written, linger or close.
        case closing
        /// The write side is shut; what the client still sends is read and dropped until `until`, or its end.
        case lingering(until: UInt64)
    }

    /// How long a lingering connection reads and drops what its client still sends.
    static let lingerMillis: UInt64 = 2000

    private(set) var phase: Phase = .idle
    /// The client shut its side: answer what is buffered, then close.
    private(set) var peerClosed = false
    /// When the last answer was completely written (or the connection accepted): the idle timer's start.
    private(set) var lastActivity: UInt64
    /// Bytes sent over the connection's life, and where the current write period began (while output is unsent):
    /// each period of the write timeout must send a minimum, so a trickle of reads never holds the connection.
    private(set) var bytesSent = 0
    private(set) var writePeriodStart: UInt64?
    private(set) var writePeriodSent = 0

    /// Whether any answer has been written whole: until then the connection has not been used, and waits no longer
    /// than a request may take (a connection that never sends a byte held its slot for the idle timeout, 75 s).
    private(set) var usedOnce = false

    init(now: UInt64) { lastActivity = now }

    var isHandling: Bool {
        switch phase {
        case .handling, .streaming: return true
        default: return false
        }
    }

    var isStreaming: Bool {
        if case .streaming = phase { return true }
        return false
    }

    var isLingering: Bool {
        if case .lingering = phase { return true }
        return false
    }

    /// The answer queued now ends the connection.
    var closesAfterWrite: Bool { phase == .closing }

    /// Whether the next buffered request may be parsed and dispatched: none is with its handler, the connection is
    /// not ending, and its unsent answers are under their bound (backpressure). While the answers of every connection
    /// together are over the process's budget (`outputOverBudget`), only a connection that has sent all of its own
    /// goes on: a client that does not read holds no more than it already does.
    func mayDispatch(pendingOutput: Int, maxPendingOutput: Int, outputOverBudget: Bool = false) -> Bool {
        switch phase {
        case .idle, .reading: return pendingOutput < maxPendingOutput && !(outputOverBudget && pendingOutput > 0)
        case .handling, .streaming, .closing, .lingering: return false
        }
    }

    /// Nothing with a handler, nothing to write, no partial request: a draining server may close it now.
    func isIdle(pendingOutput: Int, midRequest: Bool) -> Bool { !isHandling && pendingOutput == 0 && !midRequest }

    // MARK: - Reading

    /// What to do with bytes just read.
    enum Input { case parse, drop }

    /// Bytes arrived. Any byte starts the request timer, even the empty lines allowed before a request line: a
    /// client that trickles CRLFs is bound by the request timeout, not kept alive by them. Reading never counts as
    /// activity for the idle timer (that runs from the last complete answer).
    mutating func received(now: UInt64) -> Input {
        switch phase {
        case .lingering: return .drop
        case .idle: phase = .reading(since: now)
        case .reading, .handling, .streaming, .closing: break
        }
        return .parse
    }

    /// The client ended its side. True when the connection is to close now (it was lingering: nothing is owed).
    mutating func receivedEnd() -> Bool {
        if isLingering { return true }
        peerClosed = true
        return false
    }

    /// The parser needs more bytes. True when the connection is to close now: its client ended mid-request, or ended
    /// with nothing left to answer. A client that ended after a whole answer is still being written gets it first.
    mutating func needsMore(midRequest: Bool, pendingOutput: Int, now: UInt64) -> Bool {
        if midRequest {
            if phase == .idle { phase = .reading(since: now) }
            return peerClosed
        }
        guard peerClosed else { return false }
        if pendingOutput == 0 { return true }
        phase = .closing
        return false
    }

    /// A whole request was parsed and goes to its handler.
    mutating func dispatched(_ request: InFlight) { phase = .handling(request) }

    /// The request could not be parsed: its error answer ends the connection.
    mutating func refused() { phase = .closing }

    // MARK: - Answering

    /// The handler answered. Returns how to write the answer, and whether the connection stays open for the next
    /// request (the client asked to keep it, the server is not draining, the client has not ended, and the answer
    /// does not say `Connection: close`); nil when no request was in flight.
    mutating func answered(closeRequested: Bool, draining: Bool) -> (InFlight, keepAlive: Bool)? {
        guard case let .handling(request) = phase else { return nil }
        let keepAlive = request.keepAlive && !draining && !peerClosed && !closeRequested
        phase = keepAlive ? .idle : .closing
        return (request, keepAlive)
    }

    /// An answer was queued behind `alreadyPending` unsent bytes: a write period starts when the output was empty.
    /// The head of a streamed answer goes out: as ``answered(closeRequested:draining:)``, but the connection stays busy
    /// until ``streamEnded()``. HTTP/1.0 has no chunks: its body ends with the connection.
    mutating func streamStarted(closeRequested: Bool, draining: Bool) -> (InFlight, keepAlive: Bool)? {
        guard case let .handling(request) = phase else { return nil }
        let keepAlive =
            request.keepAlive && !draining && !peerClosed && !closeRequested && request.version == .http1_1
        phase = .streaming(request, keepAlive: keepAlive)
        return (request, keepAlive)
    }

    /// The streamed body is complete: whether the connection stays open for the next request; nil when no stream was
    /// under way.
    mutating func streamEnded() -> Bool? {
        guard case let .streaming(_, keepAlive) = phase else { return nil }
        phase = keepAlive ? .idle : .closing
        return keepAlive
    }

    /// The streamed answer's request, while one is under way.
    var streamingRequest: InFlight? {
        if case let .streaming(request, _) = phase { return request }
        return nil
    }

    mutating func queued(alreadyPending: Int, now: UInt64) {
        guard alreadyPending == 0 else { return }
        writePeriodStart = now
        writePeriodSent = bytesSent
    }

    mutating func sent(_ count: Int) { bytesSent += count }

    /// Every queued byte is written: the write period ends and the idle timer restarts.
    mutating func drained(now: UInt64) {
        writePeriodStart = nil
        lastActivity = now
        usedOnce = true
    }

    /// What an ending connection does once its last answer is written.
    enum Ending { case stayOpen, shutWriteSideAndLinger, close }

    /// The output is written and nothing more is queued: an ending connection lingers (when its client may still be
    /// sending: it then reads our answer before a reset) or closes; any other stays open.
    mutating func endIfClosing(bufferedInput: Bool, midRequest: Bool, now: UInt64) -> Ending {
        guard phase == .closing else { return .stayOpen }
        if bufferedInput || midRequest || !peerClosed {
            phase = .lingering(until: now + Self.lingerMillis)
            return .shutWriteSideAndLinger
        }
        return .close
    }

    // MARK: - Interest and timers

    /// Whether the loop should wait for the socket to be readable and writable. Reading stops while the input waiting
    /// to be parsed, or the answers waiting to be sent, are at their bound (the kernel's buffers then fill and TCP
    /// holds the client back), and once the client ended its side.
    ///
    /// Unparsed input beyond ``inputAllowance`` is read only for the request being received, up to
    /// `maxBufferedInput`: not while a request is with its handler or its answer waits to be sent (requests pipelined
    /// behind it wait in the kernel, not here). A request larger than the allowance waits for its share of the
    /// process's budget (`waitsForInputBudget`: nothing is read meanwhile).
    func interest(
        pendingOutput: Int, bufferedInput: Int, maxPendingOutput: Int, maxBufferedInput: Int,
        waitsForInputBudget: Bool = false
    ) -> (read: Bool, write: Bool) {
        let inputBound =
            isHandling || isStreaming || pendingOutput > 0
            ? min(ConnectionState.inputAllowance, maxBufferedInput) : maxBufferedInput
        let backPressure =
            (waitsForInputBudget || bufferedInput > inputBound || pendingOutput >= maxPendingOutput) && !isLingering
        return (!peerClosed && !backPressure, pendingOutput > 0)
    }

    /// Input a connection may always hold: a request's head and a small body, or a few pipelined requests.
    static let inputAllowance = 64 * 1024

    /// The timers a connection is bound by.
    struct Timeouts {
        var requestMillis: UInt64
        var idleMillis: UInt64
        var writeMillis: UInt64
        var minBytesPerWritePeriod: Int
    }

    /// What a timer that ran out asks for.
    enum Expiry: Equatable {
        case none
        /// Close at once: lingered long enough, or idle too long.
        case close
        /// The client does not read its answers: reset the connection (the kernel drops what it would never read).
        case reset
        /// The request was not received in time: answer 408, which ends the connection.
        case requestTimeout
    }

    /// Checks the timers at `now` (idle time counts for nothing while the server drains).
    mutating func expired(
        now: UInt64, timeouts: Timeouts, draining: Bool, pendingOutput: Int, midRequest: Bool
    ) -> Expiry {
        if case let .lingering(until) = phase { return now >= until ? .close : .none }
        if pendingOutput > 0, let start = writePeriodStart, now - start > timeouts.writeMillis {
            // Each write period must send its minimum (or finish): a byte at a time does not count as reading.
            if bytesSent - writePeriodSent < timeouts.minBytesPerWritePeriod { return .reset }
            writePeriodStart = now
            writePeriodSent = bytesSent
        }
        if isHandling || pendingOutput > 0 { return .none }
        // The request timer runs from a request's first byte to its last; idle time from the last complete answer.
        // Neither is refreshed by a trickle of bytes.
        if case let .reading(since) = phase, now - since > timeouts.requestMillis {
            phase = .closing
            return .requestTimeout
        }
        if midRequest { return .none }
        let idle = draining ? 0 : usedOnce ? timeouts.idleMillis : min(timeouts.idleMillis, timeouts.requestMillis)
        return now - lastActivity > idle ? .close : .none
    }
}
