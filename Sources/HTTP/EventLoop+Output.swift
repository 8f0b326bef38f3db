import CLinuxShims
import Glibc

/// Writing a connection's answers: the output buffer, backpressure (a connection stops reading while
/// ``HTTPServer/Configuration/maxPendingOutputBytes`` of its answers are unsent), the epoll interest that follows from
/// it, and closing. Loop-confined, as everything of ``EventLoop``'s connections.
extension EventLoop {
    func enqueue(_ bytes: [UInt8], on connection: HTTPConnection, now: UInt64) {
        assertOnLoop()
        if connection.outputOffset == connection.output.count {
            connection.output = bytes
            connection.outputOffset = 0
            connection.writePeriodStart = now
            connection.writePeriodSent = connection.bytesSent
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
                connection.bytesSent += n
                core.pendingOutputBytes.subtract(n, ordering: .relaxed)
            } else if n < 0 && errno == EINTR {
                continue
            } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
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
        connection.output.removeAll(keepingCapacity: connection.output.capacity <= 64 * 1024)
        connection.outputOffset = 0
        connection.writePeriodStart = nil
        connection.lastActivity = now
        if resume, !connection.closeAfterWrite, !connection.inFlight, connection.parser.bufferedBytes > 0 {
            process(connection, now: now)
            guard connections[connection.fd] === connection else { return }
        }
        if connection.closeAfterWrite && !connection.inFlight {
            if connection.parser.bufferedBytes > 0 || connection.parser.isMidRequest || !connection.peerClosed {
                // Shut the write side and drain what the client still sends, so it reads our answer before a reset.
                shutdown(connection.fd, Int32(SHUT_WR))
                connection.lingerDeadline = now + 2000
            } else {
                closeConnection(connection)
                return
            }
        }
        updateInterest(connection)
    }

    func updateInterest(_ connection: HTTPConnection) {
        assertOnLoop()
        guard connections[connection.fd] === connection else { return }
        // RDHUP only with IN: level-triggered, a half-close reported while reading is paused (backpressure, a request
        // in flight after the peer closed) would wake the loop at once, again and again, with nothing it handles.
        var wanted: UInt32 = 0
        // Stop reading while the input waiting to be parsed, or the answers waiting to be sent, are at their bound:
        // the kernel's buffers then fill and TCP holds the client back.
        let backPressure =
            (connection.parser.bufferedBytes > 4 * 1024 * 1024
                || connection.pendingOutput >= core.configuration.maxPendingOutputBytes)
            && connection.lingerDeadline == nil
        if !connection.peerClosed && !backPressure { wanted |= EPOLLIN.rawValue | EPOLLRDHUP.rawValue }
        if connection.hasPendingOutput { wanted |= EPOLLOUT.rawValue }
        if wanted != connection.interest {
            connection.interest = wanted
            register(connection.fd, events: wanted, op: EPOLL_CTL_MOD)
        }
    }

    func closeConnection(_ connection: HTTPConnection) {
        assertOnLoop()
        guard connections.removeValue(forKey: connection.fd) != nil else { return }
        core.pendingOutputBytes.subtract(connection.pendingOutput, ordering: .relaxed)
        connection.output = []
        connection.outputOffset = 0
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, connection.fd, nil)
        close(connection.fd)
        core.openConnections.subtract(1, ordering: .relaxed)
        core.release(HTTPServer.Core.address(of: connection.remote))
    }
}
