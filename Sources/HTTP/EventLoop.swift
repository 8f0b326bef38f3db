import CLinuxShims
import Dispatch
import Glibc
import Synchronization

/// One epoll event loop on its own thread: a listener, the connections it accepted, and an inbox of responses
/// that handler tasks post back through an `eventfd`.
///
/// It is also a serial executor, and watches other sockets on request (``whenReady(_:writable:_:)``): a database
/// connection placed on the loop runs its non-blocking I/O here, so a handler's query costs no thread hop.
///
/// `@unchecked Sendable`: every mutable property is touched only on the loop's thread, except `inbox` and
/// `commands`, which are behind a `Mutex` and announced through `wakeFD`.
public final class EventLoop: @unchecked Sendable {
    enum Command { case drain, stop }

    struct Completion {
        enum Kind {
            case response(HTTPResponse)
            /// A piece of a streamed body, and the writer waiting for room to send the next.
            case chunk([UInt8], CheckedContinuation<Void, any Error>)
            /// The streamed body is complete, or its producer failed (then the connection is cut).
            case end(failed: Bool)
        }

        let fd: Int32
        let id: UInt64
        let kind: Kind
    }

    let core: HTTPServer.Core
    let epollFD: Int32
    private let wakeFD: Int32
    /// The eventfd while the loop runs, -1 once it is closed. Every write to it happens under this lock, so a
    /// late wake-up (a handler finishing after shutdown) can never write into a descriptor number that another
    /// part of the process (a database socket) has reused since.
    private let wakeHandle: Mutex<Int32>
    private var listenFD: Int32
    var connections: [Int32: HTTPConnection] = [:]
    /// Connections closed while their handler still ran, by id: each keeps its place in ``HTTPServer/Core``'s
    /// connection counts (the process's and its address's) until its handler's answer, or its stream's end
    /// (`untilEnd`), comes back. A client that resets its connection mid-request would otherwise free its slot at
    /// once and leave its handler running: any number of handlers from one address, past every connection limit.
    var orphans: [UInt64: (remote: String, untilEnd: Bool)] = [:]
    let inbox = Mutex<[Completion]>([])
    /// Streamed bodies' writers waiting for their connection's unsent output to fall below its bound, by connection id.
    var streamWaiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]
    private let commands = Mutex<[Command]>([])
    /// Jobs of handler tasks that prefer this loop as their executor (see ``dispatch(_:on:)``), and whether the
    /// loop has stopped (then jobs run on Dispatch instead).
    let jobs = Mutex<(queue: [UnownedJob], stopped: Bool)>(([], false))
    /// The loop thread's array for the batch of jobs it runs, traded with `jobs.queue` (``runJobs()``).
    var spareJobs: [UnownedJob] = []

    /// Loops are kept for the life of the process: tasks hold this executor unowned and may resume after shutdown.
    private static let retained = Mutex<[EventLoop]>([])
    /// Open once the loop's thread has stopped (``run()`` returned).
    let finished = Gate()
    /// Open once the loop stopped watching the shared listener (the server may then close it).
    let releasedListener = Gate()
    private var nextID: UInt64 = 0
    var draining = false
    private var acceptPausedUntil: UInt64 = 0
    private var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
    /// Sockets watched for others (one-shot), and those registered with epoll at all.
    var watchers: [Int32: () -> Void] = [:]
    var watched: Set<Int32> = []
    /// The loop's thread while it runs, 0 otherwise.
    let threadID = Atomic<UInt>(0)
    /// Runs the jobs that arrive once the loop has stopped, still one at a time.
    let afterStop = DispatchQueue(label: "http.loop.after-stop")

    init(core: HTTPServer.Core, listenFD: Int32) throws {
        self.core = core
        self.listenFD = listenFD
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else { throw SocketError("epoll_create1") }
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        guard wakeFD >= 0 else { throw SocketError("eventfd") }
        wakeHandle = Mutex(wakeFD)
        register(wakeFD, events: EPOLLIN.rawValue, op: EPOLL_CTL_ADD)
        register(listenFD, events: EPOLLIN.rawValue | EPOLLEXCLUSIVE.rawValue, op: EPOLL_CTL_ADD)
        EventLoop.retained.withLock { $0.append(self) }
    }

    var isFinished: Bool { finished.isOpen }

    /// Sends a command to the loop from any thread.
    func post(_ command: Command) {
        commands.withLock { $0.append(command) }
        wake()
    }

    func wake() {
        wakeHandle.withLock { fd in
            guard fd >= 0 else { return }
            var one: UInt64 = 1
            _ = write(fd, &one, 8)
        }
    }

    /// Posts a handler's response; called from the handler's task.
    func complete(fd: Int32, id: UInt64, response: HTTPResponse) { post(Completion(fd: fd, id: id, kind: .response(response))) }

    /// Posts a completion from a handler's task (see ``complete(fd:id:response:)``).
    func post(_ completion: Completion) {
        // Only the first completion into an empty inbox needs a wake-up: the loop drains the whole inbox after
        // reading the eventfd, so later ones ride along (one syscall per batch instead of one per response). None
        // is needed on the loop's own thread: it checks its inbox before it next waits (``hasLocalWork``).
        let wasEmpty = inbox.withLock { items -> Bool in
            let empty = items.isEmpty
            items.append(completion)
            return empty
        }
        if wasEmpty && !isCurrent { wake() }
    }

    // MARK: - Loop

    func run() {
        threadID.store(pthread_self(), ordering: .relaxed)
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        var lastSweep = Socket.monotonicMillis()
        var running = true
        while running {
            let count = epoll_wait(epollFD, &events, Int32(events.count), hasLocalWork ? 0 : 250)
            let now = Socket.monotonicMillis()
            if count > 0 {
                for i in 0..<Int(count) {
                    let fd = events[i].data.fd
                    let flags = events[i].events
                    if fd == wakeFD {
                        var value: UInt64 = 0
                        _ = read(wakeFD, &value, 8)
                    } else if fd == listenFD {
                        acceptAll(now: now)
                    } else if let watcher = watchers.removeValue(forKey: fd) {
                        watcher()
                    } else if let connection = connections[fd] {
                        if flags & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
                            onReadable(connection, now: now)
                        }
                        if flags & EPOLLOUT.rawValue != 0, connections[fd] === connection {
                            flush(connection, now: now, resume: true)
                        }
                    }
                }
            }
            runJobs()
            drainInbox(now: now)
            for command in commands.withLock({ c -> [Command] in
                defer { c.removeAll() }; return c
            }) {
                switch command {
                case .drain: beginDrain()
                case .stop: running = false
                }
            }
            if acceptPausedUntil != 0, now >= acceptPausedUntil, listenFD >= 0 {
                acceptPausedUntil = 0
                register(listenFD, events: EPOLLIN.rawValue | EPOLLEXCLUSIVE.rawValue, op: EPOLL_CTL_ADD)
            }
            if now - lastSweep >= 200 {
                lastSweep = now
                sweepTimeouts(now: now)
            }
            if draining && connections.isEmpty { running = false }
        }
        stop()
    }

    /// The steps of a stop, in order (``stop()``); a test may pause at each (``stopHook``).
    enum StopStep: Sendable {
        /// Connections closed, listener released, epoll and eventfd closed; the loop's state is still its own.
        case closed
        /// The loop's own state is cleared and it no longer counts as current: jobs may now run elsewhere.
        case handedOff
    }

    /// Called on the loop's thread at each step of its stop: tests force the interleavings of a stop with it.
    nonisolated(unsafe) static var stopHook: (@Sendable (EventLoop, StopStep) -> Void)?

    /// The end of ``run()``. Everything the loop's thread alone may touch (connections, watchers) is cleared *before*
    /// any job can run elsewhere: a job that is left over, or arrives later, runs on ``afterStop`` and may call
    /// ``forget(_:)`` or ``whenReady(_:writable:_:)`` (a database connection's isolated deinit does), which off the loop
    /// never touch that state.
    private func stop() {
        assertOnLoop()
        for connection in Array(connections.values) { closeConnection(connection) }
        for id in Array(orphans.keys) { releaseOrphan(id, atEnd: true) }
        releaseListener()
        close(epollFD)
        wakeHandle.withLock { fd in
            close(fd)
            fd = -1
        }
        EventLoop.stopHook?(self, .closed)
        // Whoever waits on a socket re-checks it, now with poll(2) (``whenReady(_:writable:_:)`` off the loop).
        let waiting = Array(watchers.values)
        watchers.removeAll()
        watched.removeAll()
        // Jobs still queued, and any that arrive from now on, run on a serial queue.
        let leftover = jobs.withLock { state -> [UnownedJob] in
            state.stopped = true
            defer { state.queue.removeAll() }
            return state.queue
        }
        threadID.store(0, ordering: .relaxed)
        for job in leftover { afterStop.async { self.run(job) } }
        EventLoop.stopHook?(self, .handedOff)
        for watcher in waiting { watcher() }
        finished.open()
    }

    /// Traps, in debug builds, when called off the loop's thread: for what only the loop may touch.
    @inline(__always)
    func assertOnLoop(_ function: StaticString = #function) {
        assert(isCurrent, "\(function) runs on its event loop's thread only")
    }

    /// Jobs or completions that the loop's own thread queued without a wake-up: the next `epoll_wait` must not sleep.
    /// Another thread that queues into an empty queue wakes the loop; one that finds it non-empty relies on this.
    private var hasLocalWork: Bool {
        jobs.withLock { !$0.queue.isEmpty } || inbox.withLock { !$0.isEmpty }
    }

    func register(_ fd: Int32, events: UInt32, op: Int32) {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        _ = epoll_ctl(epollFD, op, fd, &event)
    }

    // MARK: - Accept

    private func acceptAll(now: UInt64) {
        assertOnLoop()
        while listenFD >= 0 {
            let accepted: (fd: Int32, remote: String)?
            do {
                accepted = try Socket.accept(listenFD)
            } catch {
                // Out of descriptors (EMFILE/ENFILE) or similar: stop accepting briefly instead of spinning.
                _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, listenFD, nil)
                acceptPausedUntil = now + 100
                core.log("accept failed: \(error); pausing accept for 100 ms")
                return
            }
            guard let (fd, remote) = accepted else { return }
            guard core.openConnections.load(ordering: .relaxed) < core.configuration.maxConnections,
                core.admit(remote)
            else {
                // Counted before the answer goes out: a client that reads its 503 finds the refusal counted.
                core.refusedConnections.add(1, ordering: .relaxed)
                var refusal = core.errorResponse(503, "too many open connections").serialized(
                    version: .http1_1, keepAlive: false)
                _ = send(fd, &refusal, refusal.count, Int32(MSG_NOSIGNAL))
                close(fd)
                continue
            }
            core.openConnections.add(1, ordering: .relaxed)
            nextID &+= 1
            let connection = HTTPConnection(
                fd: fd, id: nextID, remote: remote, limits: core.configuration.limits, now: now)
            connections[fd] = connection
            connection.interest = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
            register(fd, events: connection.interest, op: EPOLL_CTL_ADD)
        }
    }

    // MARK: - Read, process, write

    private func onReadable(_ connection: HTTPConnection, now: UInt64) {
        assertOnLoop()
        var input = ConnectionState.Input.parse
        while true {
            let n = read(connection.fd, &readBuffer, readBuffer.count)
            if n > 0 {
                input = connection.state.received(now: now)
                if input == .parse { connection.parser.append(readBuffer[0..<n]) }
                // Parse what came before reading more: the loop's level-triggered wait brings the rest.
                if n < readBuffer.count || connection.parser.bufferedBytes > ConnectionState.inputAllowance { break }
            } else if n == 0 {
                if connection.state.receivedEnd() {
                    closeConnection(connection)
                    return
                }
                break
            } else {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK { break }
                closeConnection(connection)
                return
            }
        }
        if !connection.state.isLingering { process(connection, now: now) }
        updateInterest(connection)
    }

    /// Input buffered beyond this stops reading until it is parsed (backpressure on the client).
    static let maxBufferedInput = 4 * 1024 * 1024

    /// Parses and dispatches buffered requests, one at a time.
    func process(_ connection: HTTPConnection, now: UInt64) {
        assertOnLoop()
        while connection.state.mayDispatch(
            pendingOutput: connection.pendingOutput, maxPendingOutput: core.configuration.maxPendingOutputBytes,
            outputOverBudget: core.pendingOutputBytes.load(ordering: .relaxed) > core.configuration.maxPendingOutputTotal)
        {
            switch connection.parser.next() {
            case .needMore:
                if connection.state.needsMore(
                    midRequest: connection.parser.isMidRequest, pendingOutput: connection.pendingOutput, now: now)
                {
                    closeConnection(connection)
                }
                return
            case .expectContinue:
                enqueue(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8), on: connection, now: now)
                // A failed send closed it (and its descriptor may be another connection's by now).
                guard connections[connection.fd] === connection else { return }
            case let .request(request):
                connection.state.dispatched(
                    .init(version: request.version, keepAlive: request.keepAlive, isHead: request.method == "HEAD"))
                dispatch(request, on: connection)
            case let .error(error):
                connection.state.refused()
                let response = core.errorResponse(error.status, error.message)
                core.countParseError(status: error.status)
                enqueue(response.serialized(version: .http1_1, keepAlive: false), on: connection, now: now)
                return
            }
        }
    }

    private func dispatch(_ request: HTTPRequest, on connection: HTTPConnection) {
        assertOnLoop()
        var request = request
        request.remoteAddress = connection.remote
        let fd = connection.fd
        let id = connection.id
        let handler = core.handler
        core.inFlightRequests.add(1, ordering: .relaxed)
        if let immediate = core.immediate, let response = immediate(request) {
            complete(fd: fd, id: id, response: response)
            return
        }
        Task(executorPreference: self) {
            let response = await handler(request)
            self.complete(fd: fd, id: id, response: response)
            if let stream = response.stream, request.method != "HEAD" { await self.produce(stream, fd: fd, id: id) }
        }
    }

    private func drainInbox(now: UInt64) {
        assertOnLoop()
        let completions = inbox.withLock { items -> [Completion] in
            defer { items.removeAll() }; return items
        }
        for completion in completions {
            let response: HTTPResponse
            switch completion.kind {
            case let .response(answer): response = answer
            case let .chunk(bytes, writer):
                streamed(bytes, writer: writer, fd: completion.fd, id: completion.id, now: now)
                continue
            case let .end(failed):
                endStream(fd: completion.fd, id: completion.id, failed: failed, now: now)
                continue
            }
            core.inFlightRequests.subtract(1, ordering: .relaxed)
            // The connection may have closed and its descriptor been reused: match the id, not just the fd.
            guard let connection = connections[completion.fd], connection.id == completion.id else {
                releaseOrphan(completion.id, atEnd: false)
                continue
            }
            let closeRequested = response.headers["connection"]?.lowercased() == "close"
            if response.stream != nil, connection.state.streamingRequest == nil {
                if startStream(response, on: connection, closeRequested: closeRequested, now: now) { continue }
            }
            guard let (request, keepAlive) = connection.state.answered(closeRequested: closeRequested, draining: draining)
            else { continue }
            let bytes = response.serialized(version: request.version, keepAlive: keepAlive, omitBody: request.isHead)
            enqueue(bytes, on: connection, now: now)
            if connections[completion.fd] === connection, !connection.state.closesAfterWrite {
                process(connection, now: now)
                updateInterest(connection)
            }
        }
    }

    // MARK: - Drain

    /// Stops watching the shared listener; the server closes it once every loop has let go.
    private func releaseListener() {
        assertOnLoop()
        if listenFD >= 0 {
            _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, listenFD, nil)
            listenFD = -1
        }
        releasedListener.open()
    }

    private func beginDrain() {
        assertOnLoop()
        guard !draining else { return }
        draining = true
        releaseListener()
        for connection in Array(connections.values) where connection.isIdle {
            closeConnection(connection)
        }
    }
}
