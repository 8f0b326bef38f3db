import Synchronization

/// A one-way event: closed until ``open()``, then open for good. Tasks wait for it without polling; a waiting task
/// that is cancelled stops waiting (``wait(until:)`` then answers false).
public final class Gate: Sendable {
    private struct State {
        var isOpen = false
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var next: UInt64 = 0
    }

    private let state = Mutex(State())

    public init() {}

    public var isOpen: Bool { state.withLock { $0.isOpen } }

    /// Opens the gate: every waiter resumes, and later waits return at once.
    public func open() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            guard !s.isOpen else { return [] }
            s.isOpen = true
            defer { s.waiters.removeAll() }
            return Array(s.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Waits until the gate opens, the task is cancelled, or `deadline` passes (never, when nil).
    ///
    /// - Returns: whether the gate is open.
    @discardableResult
    public func wait(until deadline: ContinuousClock.Instant? = nil) async -> Bool {
        if isOpen { return true }
        guard let deadline else {
            await waitOpenOrCancelled()
            return isOpen
        }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await self.waitOpenOrCancelled()
                return self.isOpen
            }
            group.addTask {
                try? await Task.sleep(until: deadline, clock: .continuous)
                return self.isOpen
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first || isOpen
        }
    }

    /// Waits until the gate opens, whatever happens to the waiting task: for what must have finished before the
    /// caller goes on (a loop's thread, once told to stop).
    public func waitUninterruptibly() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { s -> Bool in
                if s.isOpen { return true }
                s.waiters[s.next] = continuation
                s.next += 1
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    private func waitOpenOrCancelled() async {
        let id = state.withLock { s -> UInt64 in
            defer { s.next += 1 }
            return s.next
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { s -> Bool in
                    if s.isOpen || Task.isCancelled { return true }
                    s.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume()
        }
    }
}
