/// One client connection: its socket, its parser, its unsent output, and its state (``ConnectionState``), which
/// makes every decision the loop carries out. Confined to the event loop thread that accepted it.
final class HTTPConnection {
    let fd: Int32
    let id: UInt64
    let remote: String
    var parser: HTTPParser
    var state: ConnectionState
    var output: [UInt8] = []
    var outputOffset = 0
    /// The epoll events registered for it.
    var interest: UInt32 = 0
    /// The share of the process's input budget its request in progress holds (``HTTPServer/Core/reservedInputBytes``);
    /// 0 while it holds no more than the allowance.
    var reservedInput = 0
    /// The input its request in progress holds, as last counted in the process's total
    /// (``HTTPServer/Core/heldInputBytes``).
    var countedInput = 0
    /// Reading is paused until the process's input budget has room for its request: the sweep looks again.
    var waitsForInputBudget = false

    init(fd: Int32, id: UInt64, remote: String, limits: HTTPLimits, now: UInt64) {
        self.fd = fd
        self.id = id
        self.remote = remote
        self.parser = HTTPParser(limits: limits)
        self.state = ConnectionState(now: now)
    }

    var hasPendingOutput: Bool { outputOffset < output.count }
    var pendingOutput: Int { output.count - outputOffset }

    /// Nothing in flight, nothing to write and no partial request: safe to close while draining.
    var isIdle: Bool { state.isIdle(pendingOutput: pendingOutput, midRequest: parser.isMidRequest) }
}
