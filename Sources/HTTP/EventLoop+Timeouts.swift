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
            if connection.parser.isMidRequest, let started = connection.requestStarted {
                if now - started > configuration.requestTimeoutMillis {
                    connection.closeAfterWrite = true
                    core.countParseError(status: 408)
                    let response = core.errorResponse(408, "the request was not received in time")
                    enqueue(response.serialized(version: .http1_1, keepAlive: false), on: connection, now: now)
                }
                continue
            }
            let idleLimit = draining ? 0 : configuration.idleTimeoutMillis
            if now - connection.lastActivity > idleLimit { closeConnection(connection) }
        }
    }
}
