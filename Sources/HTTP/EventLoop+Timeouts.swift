import Glibc

extension EventLoop {
    /// Closes what overstayed: idle keep-alive connections, unread output, requests not received in time (408).
    func sweepTimeouts(now: UInt64) {
        assertOnLoop()
        let configuration = core.configuration
        for connection in Array(connections.values) {
            if let deadline = connection.lingerDeadline {
                if now >= deadline { closeConnection(connection) }
                continue
            }
            if connection.hasPendingOutput, let start = connection.writePeriodStart,
                now - start > configuration.writeTimeoutMillis
            {
                // Each write period must send its minimum (or finish): a byte at a time does not count as reading.
                if connection.bytesSent - connection.writePeriodSent < configuration.minBytesPerWriteTimeout {
                    core.writeTimeouts.add(1, ordering: .relaxed)
                    // Reset, not FIN: the kernel drops what the client would never read instead of keeping it.
                    var abort = linger(l_onoff: 1, l_linger: 0)
                    setsockopt(connection.fd, SOL_SOCKET, SO_LINGER, &abort, socklen_t(MemoryLayout<linger>.size))
                    closeConnection(connection)
                    continue
                }
                connection.writePeriodStart = now
                connection.writePeriodSent = connection.bytesSent
            }
            if connection.inFlight || connection.hasPendingOutput { continue }
            // The request timer runs from a request's first byte (empty lines before a request line included) to its
            // last; idle time runs from the last complete response. Neither is refreshed by a trickle of bytes.
            if let started = connection.requestStarted, now - started > configuration.requestTimeoutMillis {
                connection.closeAfterWrite = true
                core.countParseError(status: 408)
                let response = core.errorResponse(408, "the request was not received in time")
                enqueue(response.serialized(version: .http1_1, keepAlive: false), on: connection, now: now)
                continue
            }
            if connection.parser.isMidRequest { continue }
            let idleLimit = draining ? 0 : configuration.idleTimeoutMillis
            if now - connection.lastActivity > idleLimit { closeConnection(connection) }
        }
    }
}
