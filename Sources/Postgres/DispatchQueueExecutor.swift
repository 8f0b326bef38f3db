import Dispatch

/// A serial executor over a private `DispatchQueue`, so an actor's blocking libpq calls never occupy the
/// cooperative thread pool (two threads on a two-core machine). `DispatchSerialQueue` does not exist on Linux.
final class DispatchQueueExecutor: SerialExecutor {
    let queue: DispatchQueue

    init(label: String) { queue = DispatchQueue(label: label) }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }
}
