import Glibc

extension EventLoop {
    /// Closes what overstayed: idle keep-alive connections, unread output, requests not received in time (408).
    func sweepTimeouts(now: UInt64) {
        assertOnLoop()
        let configuration = core.configuration
        let timeouts = ConnectionState.Timeouts(
            requestMillis: configuration.requestTimeoutMillis, idleMillis: configuration.idleTimeoutMillis,
            writeMillis: configuration.writeTimeoutMillis, minBytesPerWritePeriod: configuration.minBytesPerWriteTimeout)
        for connection in Array(connections.values) {
            if connection.waitsForInputBudget { updateInterest(connection) }
            switch connection.state.expired(
                now: now, timeouts: timeouts, draining: draining, pendingOutput: connection.pendingOutput,
                midRequest: connection.parser.isMidRequest)
            {
            case .none: break
            case .close: closeConnection(connection)
            case .reset:
                core.writeTimeouts.add(1, ordering: .relaxed)
                // Reset, not FIN: the kernel drops what the client would never read instead of keeping it.
                var abort = linger(l_onoff: 1, l_linger: 0)
                setsockopt(connection.fd, SOL_SOCKET, SO_LINGER, &abort, socklen_t(MemoryLayout<linger>.size))
                closeConnection(connection)
            case .requestTimeout:
                core.countParseError(status: 408)
                let response = core.errorResponse(408, "the request was not received in time")
                enqueue(response.serialized(version: .http1_1, keepAlive: false), on: connection, now: now)
            }
        }
    }
}
