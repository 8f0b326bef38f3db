/// Streamed answers (``ResponseBody``): the head first, then each piece the handler's task produces, each write
/// waiting while the connection's unsent output is at ``HTTPServer/Configuration/maxPendingOutputBytes``, so a slow
/// reader slows the producer instead of filling memory. Loop-confined but for ``produce(_:fd:id:)``, which runs on the
/// handler's task and reaches the loop through its inbox.
extension EventLoop {
    struct StreamClosed: Error {}

    /// Runs the producer of a streamed answer on the handler's task, then posts its end.
    func produce(_ stream: ResponseBody, fd: Int32, id: UInt64) async {
        let writer = ResponseBodyWriter { bytes in
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                self.post(Completion(fd: fd, id: id, kind: .chunk(bytes, continuation)))
            }
        }
        do {
            try await stream.produce(writer)
            post(Completion(fd: fd, id: id, kind: .end(failed: false)))
        } catch {
            post(Completion(fd: fd, id: id, kind: .end(failed: true)))
        }
    }

    /// Sends the head of a streamed answer; false when the request is a HEAD (answered as a whole, without a body).
    func startStream(_ response: HTTPResponse, on connection: HTTPConnection, closeRequested: Bool, now: UInt64) -> Bool {
        assertOnLoop()
        guard case let .handling(request) = connection.state.phase, !request.isHead,
            let (started, keepAlive) = connection.state.streamStarted(closeRequested: closeRequested, draining: draining)
        else { return false }
        enqueue(response.serializedStreamHead(version: started.version, keepAlive: keepAlive), on: connection, now: now)
        return true
    }

    /// The connection a streamed piece or end belongs to, while its stream is under way.
    private func streaming(fd: Int32, id: UInt64) -> HTTPConnection? {
        guard let connection = connections[fd], connection.id == id, connection.state.isStreaming else { return nil }
        return connection
    }

    func streamed(_ bytes: [UInt8], writer: CheckedContinuation<Void, any Error>, fd: Int32, id: UInt64, now: UInt64) {
        assertOnLoop()
        guard let connection = streaming(fd: fd, id: id), let request = connection.state.streamingRequest else {
            writer.resume(throwing: StreamClosed())
            return
        }
        enqueue(request.version == .http1_1 ? HTTPResponse.chunk(bytes) : bytes, on: connection, now: now)
        guard connections[fd] === connection else {
            writer.resume(throwing: StreamClosed())
            return
        }
        if connection.pendingOutput < core.configuration.maxPendingOutputBytes {
            writer.resume()
        } else {
            streamWaiters[connection.id] = writer
        }
    }

    /// Lets a waiting writer go on once its connection's output is below the bound (called after each flush).
    func releaseStreamWriter(_ connection: HTTPConnection) {
        guard let writer = streamWaiters[connection.id],
            connection.pendingOutput < core.configuration.maxPendingOutputBytes
        else { return }
        streamWaiters[connection.id] = nil
        writer.resume()
    }

    /// Fails the writer of a connection that closed.
    func failStreamWriter(_ connection: HTTPConnection) {
        streamWaiters.removeValue(forKey: connection.id)?.resume(throwing: StreamClosed())
    }

    func endStream(fd: Int32, id: UInt64, failed: Bool, now: UInt64) {
        assertOnLoop()
        guard let connection = streaming(fd: fd, id: id), let request = connection.state.streamingRequest else {
            releaseOrphan(id, atEnd: true)
            return
        }
        if failed {
            // No last chunk: the client must not take a cut body for a whole one.
            closeConnection(connection, handlerFinished: true)
            return
        }
        let keepAlive = connection.state.streamEnded() ?? false
        if request.version == .http1_1 { enqueue(HTTPResponse.lastChunk, on: connection, now: now) } else { flush(connection, now: now) }
        if keepAlive, connections[fd] === connection {
            process(connection, now: now)
            updateInterest(connection)
        }
    }
}
