import Dispatch
import Synchronization

/// Request log lines gathered in memory and written out in large writes: when 64 KiB have gathered, every second,
/// before any other log line (so the order holds) and at close, as nginx's `access_log … buffer=64k flush=1s` does.
/// One `write(2)` per request cost about a third of the throughput of a cheap route; this costs one per 64 KiB.
///
/// A line is lost only if the process dies without closing (SIGKILL, a crash): at most one second of request lines.
/// SIGTERM closes it (``Logger/close()``) after the drain, so a graceful stop loses none.
public final class LogBuffer: Sendable {
    public static let capacity = 64 * 1024

    private let pending = Mutex<[UInt8]>([])
    private let write: @Sendable ([UInt8]) -> Void
    /// Cancelled at ``close()``; touched only at init and close.
    nonisolated(unsafe) private let timer: any DispatchSourceTimer

    /// - Parameters:
    ///   - interval: how often the gathered lines are written even when fewer than 64 KiB have gathered.
    ///   - write: writes bytes out (standard output in production); called with the lock held, so in order.
    public init(interval: Duration = .seconds(1), write: @escaping @Sendable ([UInt8]) -> Void) {
        self.write = write
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "token-registry.log-flush"))
        let (seconds, attoseconds) = interval.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        timer.schedule(deadline: .now() + .nanoseconds(nanoseconds), repeating: .nanoseconds(nanoseconds))
        timer.setEventHandler { [weak self] in self?.flush() }
        timer.resume()
    }

    /// Adds a line (newline included); writes the buffer when it reaches ``capacity``.
    public func append(_ line: [UInt8]) {
        pending.withLock { buffer in
            buffer.append(contentsOf: line)
            if buffer.count >= Self.capacity {
                write(buffer)
                buffer.removeAll(keepingCapacity: true)
            }
        }
    }

    /// Writes `line` at once, after the lines gathered before it, in one write.
    public func writeThrough(_ line: [UInt8]) {
        pending.withLock { buffer in
            if buffer.isEmpty {
                write(line)
            } else {
                buffer.append(contentsOf: line)
                write(buffer)
                buffer.removeAll(keepingCapacity: true)
            }
        }
    }

    /// Writes whatever has gathered.
    public func flush() {
        pending.withLock { buffer in
            guard !buffer.isEmpty else { return }
            write(buffer)
            buffer.removeAll(keepingCapacity: true)
        }
    }

    /// Stops the timer and writes whatever has gathered. Lines appended later are written on the next flush call.
    public func close() {
        timer.cancel()
        flush()
    }

    deinit { timer.cancel() }
}
