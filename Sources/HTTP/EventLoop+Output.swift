import CLinuxShims
import Glibc

/// Writing a connection's answers: the output buffer, backpressure (a connection stops reading while
/// ``HTTPServer/Configuration/maxPendingOutputBytes`` of its answers are unsent), the epoll interest that follows from
/// it, and closing. Loop-confined, as everything of ``EventLoop``'s connections.
extension EventLoop {
    func enqueue(_ bytes: [UInt8], on connection: HTTPConnection, now: UInt64) {
        assertOnLoop()
        connection.state.queued(alreadyPending: connection.pendingOutput, now: now)
        if connection.outputOffset == connection.output.count {
            connection.output = bytes
            connection.outputOffset = 0
        } else {
            connection.output.append(contentsOf: bytes)
        }
        core.pendingOutputBytes.add(bytes.count, ordering: .relaxed)
        flush(connection, now: now)
    }

    /// Sends what the connection has pending. `resume`: called because the socket became writable, so requests that
    /// waited behind the output bound (pipelined, already read) are processed once the output is below it.
    func flush(_ connection: HTTPConnection, now: UInt64, resume: Bool = false) {
        assertOnLoop()
        while connection.hasPendingOutput {
            let n = connection.output.withUnsafeBytes { buffer in
                send(
                    connection.fd, buffer.baseAddress! + connection.outputOffset,
                    buffer.count - connection.outputOffset, Int32(MSG_NOSIGNAL))
            }
            if n > 0 {
                // Progress is not activity: the idle timer restarts only when the whole output is sent, and a slow
                // reader is bound by the write timeout (``sweepTimeouts(now:)``).
                connection.outputOffset += n
                connection.state.sent(n)
                core.pendingOutputBytes.subtract(n, ordering: .relaxed)
            } else if n < 0 && errno == EINTR {
                continue
            } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                releaseStreamWriter(connection)
                if resume, connection.pendingOutput < core.configuration.maxPendingOutputBytes {
                    process(connection, now: now)
                    guard connections[connection.fd] === connection else { return }
                }
                updateInterest(connection)
                return
            } else {
                closeConnection(connection)
                return
            }
        }
        connection.output.removeAll(keepingCapacity: connection.output.capacity <= HTTPParser.capacityKept)
        connection.outputOffset = 0
        connection.state.drained(now: now)
        releaseStreamWriter(connection)
        if resume, connection.parser.bufferedBytes > 0,
            connection.state.mayDispatch(pendingOutput: 0, maxPendingOutput: core.configuration.maxPendingOutputBytes)
        {
            process(connection, now: now)
            guard connections[connection.fd] === connection else { return }
        }
        // What processing queued meanwhile is sent first; the connection ends only once nothing is left to write.
        guard !connection.hasPendingOutput else {
            updateInterest(connection)
            return
        }
        switch connection.state.endIfClosing(
            bufferedInput: connection.parser.bufferedBytes > 0, midRequest: connection.parser.isMidRequest, now: now)
        {
        case .stayOpen: break
        case .shutWriteSideAndLinger:
            // Shut the write side and drain what the client still sends, so it reads our answer before a reset.
            shutdown(connection.fd, Int32(SHUT_WR))
        case .close:
            closeConnection(connection)
            return
        }
        updateInterest(connection)
    }

    /// A request whose body takes it past the allowance reads on only with its share of the process's input budget
    /// (the bytes it will hold once whole: grown when what it needs grows), and waits, reading nothing, while there is
    /// no room. The share is given back once the request is parsed, or when the connection stops receiving.
    private func reserveInput(_ connection: HTTPConnection) {
        connection.waitsForInputBudget = false
        let state = connection.state
        let receiving = !state.isHandling && !state.isStreaming && !state.isLingering && !state.closesAfterWrite
        guard receiving, connection.parser.heldBytes > ConnectionState.inputAllowance,
            let needed = connection.parser.bytesNeeded
        else {
            core.releaseInput(connection.reservedInput)
            connection.reservedInput = 0
            return
        }
        guard needed > connection.reservedInput else { return }
        if core.reserveInput(needed - connection.reservedInput, holding: connection.reservedInput) {
            connection.reservedInput = needed
        } else {
            connection.waitsForInputBudget = true
        }
    }

    func updateInterest(_ connection: HTTPConnection) {
        assertOnLoop()
        guard connections[connection.fd] === connection else { return }
        // RDHUP only with IN: level-triggered, a half-close reported while reading is paused (backpressure, a request
        // in flight after the peer closed) would wake the loop at once, again and again, with nothing it handles.
        reserveInput(connection)
        let held = connection.parser.heldBytes
        if held != connection.countedInput {
            core.heldInputBytes.add(held - connection.countedInput, ordering: .relaxed)
            connection.countedInput = held
        }
        let (read, write) = connection.state.interest(
            pendingOutput: connection.pendingOutput, bufferedInput: connection.parser.bufferedBytes,
            maxPendingOutput: core.configuration.maxPendingOutputBytes, maxBufferedInput: Self.maxBufferedInput,
            waitsForInputBudget: connection.waitsForInputBudget)
        var wanted: UInt32 = 0
        if read { wanted |= EPOLLIN.rawValue | EPOLLRDHUP.rawValue }
        if write { wanted |= EPOLLOUT.rawValue }
        if wanted != connection.interest {
            connection.interest = wanted
            register(connection.fd, events: wanted, op: EPOLL_CTL_MOD)
        }
    }

    /// Closes `connection`. While its handler (or its stream's producer) still runs, its place in the connection
    /// counts is kept until that ends (``orphans``); `handlerFinished` says it has (a stream that failed).
    func closeConnection(_ connection: HTTPConnection, handlerFinished: Bool = false) {
        assertOnLoop()
        guard connections.removeValue(forKey: connection.fd) != nil else { return }
        failStreamWriter(connection)
        core.pendingOutputBytes.subtract(connection.pendingOutput, ordering: .relaxed)
        core.releaseInput(connection.reservedInput)
        connection.reservedInput = 0
        core.heldInputBytes.subtract(connection.countedInput, ordering: .relaxed)
        connection.countedInput = 0
        connection.output = []
        connection.outputOffset = 0
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, connection.fd, nil)
        close(connection.fd)
        if !handlerFinished, connection.state.isHandling {
            orphans[connection.id] = (connection.remote, untilEnd: connection.state.isStreaming)
        } else {
            core.openConnections.subtract(1, ordering: .relaxed)
            core.release(connection.remote)
        }
    }

    /// Gives back the counts of a connection closed while its handler ran, once the handler's answer (`atEnd`
    /// false) or its stream's end (`atEnd` true) comes back; a connection closed mid-stream waits for the end.
    func releaseOrphan(_ id: UInt64, atEnd: Bool) {
        guard let orphan = orphans[id], atEnd || !orphan.untilEnd else { return }
        orphans[id] = nil
        core.openConnections.subtract(1, ordering: .relaxed)
        core.release(orphan.remote)
    }
}
