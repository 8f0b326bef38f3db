import Dispatch
import Glibc
import Synchronization

/// Handler tasks prefer the loop that owns their connection as their executor: their jobs run on the loop thread
/// between epoll rounds, so a request costs no hop to the cooperative pool and back.
extension EventLoop: TaskExecutor, SerialExecutor {
    /// Handler tasks run on the loop thread that owns their connection: no hop to the cooperative pool and back
    /// for each request. A handler that awaits a database call suspends; its continuation comes back here.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let (wasEmpty, stopped) = jobs.withLock { state -> (Bool, Bool) in
            if state.stopped { return (false, true) }
            let empty = state.queue.isEmpty
            state.queue.append(job)
            return (empty, false)
        }
        if stopped {
            // The loop has stopped: a task that still prefers it (a handler finishing after shutdown) runs on.
            afterStop.async { self.run(job) }
        } else if wasEmpty && !isCurrent {
            // On the loop's own thread no wake-up is needed: it runs its jobs before it next waits.
            wake()
        }
    }

    public func asUnownedTaskExecutor() -> UnownedTaskExecutor { UnownedTaskExecutor(ordinary: self) }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }

    /// The loop as the executor of the actors placed on it (database connections).
    public var serialExecutor: UnownedSerialExecutor { asUnownedSerialExecutor() }

    /// True on the loop's own thread (while it runs).
    public var isCurrent: Bool { threadID.load(ordering: .relaxed) == pthread_self() }

    /// Runs a job as both executors: a handler task's, or an actor's isolated to the loop.
    func run(_ job: UnownedJob) {
        job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
    }

    func runJobs() {
        assertOnLoop()
        // Bounded rounds, so a handler that keeps re-enqueueing cannot starve the sockets.
        // The queue and a spare array trade places under the lock: both keep their capacity, and neither is shared
        // when emptied, so taking a batch allocates nothing (copying the queue out made every batch a new buffer:
        // seventeen of the 167 allocations a refresh callback made).
        for _ in 0..<4 {
            var batch = spareJobs
            spareJobs = []
            jobs.withLock { swap(&$0.queue, &batch) }
            defer {
                batch.removeAll(keepingCapacity: true)
                spareJobs = batch
            }
            if batch.isEmpty { return }
            for job in batch { run(job) }
        }
        // Jobs still queued are run after the next `epoll_wait`, which does not sleep while there are any.
    }
}
