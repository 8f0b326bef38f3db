extension EventLoop {
    /// Closes what overstayed: idle keep-alive connections, unread output, requests not received in time (408).
    func sweepTimeouts(now: UInt64) {
        let configuration = core.configuration
        for connection in Array(connections.values) {
            if let deadline = connection.lingerDeadline {
                if now >= deadline { closeConnection(connection) }
                continue
            }
            if connection.inFlight { continue }
            if connection.hasPendingOutput {
                if now - connection.lastActivity > configuration.idleTimeoutMillis { closeConnection(connection) }
                continue
            }
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
