import Synchronization

/// A thread that runs jobs one at a time and watches sockets: what drives a connection's non-blocking I/O without a
/// thread of its own. The HTTP event loops are the ones the service uses (the composition root declares the
/// conformance); a connection owned by one runs its statements on that loop's thread, so a handler on the same loop
/// sends a query and resumes on its answer with no thread hop.
public protocol PostgresEventLoop: AnyObject, Sendable {
    /// The loop as a serial executor: the connections it owns are isolated to it.
    var serialExecutor: UnownedSerialExecutor { get }
    /// True on the loop's own thread.
    var isCurrent: Bool { get }
    /// Calls `ready` once, on the loop's thread, when `fd` is readable (or writable, when `writable` is true), or
    /// errs or hangs up. Called on the loop's thread; once the loop has stopped, from whatever runs its jobs, and the
    /// loop then waits for the socket on another thread (never blocking the jobs of its other connections).
    func whenReady(_ fd: Int32, writable: Bool, _ ready: @escaping @Sendable () -> Void)
    /// Stops watching `fd`; called on the loop's thread before the descriptor closes.
    func forget(_ fd: Int32)
}

/// The loops a pool may put its connections on, attached once they run. A caller on one of them gets a connection
/// of its own loop; any other caller (a background job, a CLI command) gets one of a loop in turn. Until loops are
/// attached, connections run on threads of their own.
public final class PostgresEventLoopGroup: Sendable {
    private let state = Mutex<(loops: [any PostgresEventLoop], next: Int)>(([], 0))

    public init() {}

    /// Adds the loops new connections may be placed on.
    public func attach(_ loops: [any PostgresEventLoop]) {
        state.withLock { $0.loops.append(contentsOf: loops) }
    }

    public var isEmpty: Bool { state.withLock { $0.loops.isEmpty } }

    /// The loop the caller runs on, if it is one of the group's.
    public var current: (any PostgresEventLoop)? {
        state.withLock { s in s.loops.first { $0.isCurrent } }
    }

    /// The caller's own loop, else the next loop in turn, else nil (no loops attached).
    func placement() -> (any PostgresEventLoop)? {
        state.withLock { s in
            if let own = s.loops.first(where: { $0.isCurrent }) { return own }
            guard !s.loops.isEmpty else { return nil }
            s.next = (s.next + 1) % s.loops.count
            return s.loops[s.next]
        }
    }
}
