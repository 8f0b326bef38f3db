import Dispatch
import Synchronization

/// Handler tasks prefer the loop that owns their connection as their executor: their jobs run on the loop thread
/// between epoll rounds, so a request costs no hop to the cooperative pool and back.
extension EventLoop: TaskExecutor {
    /// Handler tasks run on the loop thread that owns their connection: no hop to the cooperative pool and back
    /// for each request. A handler that awaits a database call suspends; its continuation comes back here.
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let (wasEmpty, stopped) = jobs.withLock { state -> (Bool, Bool) in
            if state.stopped { return (false, true) }
            let empty = state.queue.isEmpty
            state.queue.append(job)
            return (empty, false)
        }
        if stopped {
            // The loop has stopped: a task that still prefers it (a handler finishing after shutdown) runs on.
            let executor = asUnownedTaskExecutor()
            DispatchQueue.global().async { job.runSynchronously(on: executor) }
        } else if wasEmpty {
            wake()
        }
    }

    func asUnownedTaskExecutor() -> UnownedTaskExecutor { UnownedTaskExecutor(ordinary: self) }

    func runJobs() {
        // Bounded rounds, so a handler that keeps re-enqueueing cannot starve the sockets.
        for _ in 0..<4 {
            let batch = jobs.withLock { state -> [UnownedJob] in
                defer { state.queue.removeAll(keepingCapacity: true) }
                return state.queue
            }
            if batch.isEmpty { return }
            let executor = asUnownedTaskExecutor()
            for job in batch { job.runSynchronously(on: executor) }
        }
        if jobs.withLock({ !$0.queue.isEmpty }) { wake() }
    }
}
