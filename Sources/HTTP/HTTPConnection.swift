/// One client connection's state. Confined to the event loop thread that accepted it.
final class HTTPConnection {
    let fd: Int32
    let id: UInt64
    let remote: String
    var parser: HTTPParser
    var output: [UInt8] = []
    var outputOffset = 0
    /// A request of this connection is in a handler; the next one waits, so responses keep request order.
    var inFlight = false
    var inFlightVersion: HTTPVersion = .http1_1
    var inFlightKeepAlive = true
    var inFlightIsHead = false
    /// Close once the output is written.
    var closeAfterWrite = false
    /// The peer shut down its side: answer what is buffered, then close.
    var peerClosed = false
    /// After an error answer: the write side is shut and unread input is drained until this deadline.
    var lingerDeadline: UInt64?
    var lastActivity: UInt64
    var requestStarted: UInt64?
    var interest: UInt32 = 0
    /// Bytes sent over the connection's life, and where the current write period began (while output is unsent):
    /// each period of the write timeout must send a minimum, so a trickle of reads never holds the connection.
    var bytesSent = 0
    var writePeriodStart: UInt64?
    var writePeriodSent = 0

    init(fd: Int32, id: UInt64, remote: String, limits: HTTPLimits, now: UInt64) {
        self.fd = fd
        self.id = id
        self.remote = remote
        self.parser = HTTPParser(limits: limits)
        self.lastActivity = now
    }

    var hasPendingOutput: Bool { outputOffset < output.count }
    var pendingOutput: Int { output.count - outputOffset }

    /// Nothing in flight, nothing to write and no partial request: safe to close while draining.
    var isIdle: Bool { !inFlight && !hasPendingOutput && !parser.isMidRequest }
}
