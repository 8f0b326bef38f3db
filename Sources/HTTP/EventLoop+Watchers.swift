import CLinuxShims
import Dispatch
import Glibc

/// Sockets other than HTTP connections, watched on the loop's epoll for whoever runs on the loop: a database
/// connection in non-blocking mode waits here for its answer instead of blocking a thread.
extension EventLoop {
    /// Calls `ready` once, on the loop's thread, when `fd` is readable (or writable, when `writable` is true), or
    /// errs or hangs up.
    ///
    /// Called on the loop's thread. Off it (the loop has stopped, and its jobs run on a serial queue), the wait is
    /// a `poll(2)` on a thread of its own: never on that serial queue, where one connection's wait would hold up the
    /// others of the loop (and with them, perhaps, the transaction whose lock it waits for).
    public func whenReady(_ fd: Int32, writable: Bool, _ ready: @escaping @Sendable () -> Void) {
        guard isCurrent else {
            // A queue of its own: the poll blocks its thread (docs/security.md, class 16).
            DispatchQueue(label: "http.loop.stopped-watcher").async {
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN) | (writable ? Int16(POLLOUT) : 0), revents: 0)
                while poll(&descriptor, 1, -1) < 0 && errno == EINTR {}
                ready()
            }
            return
        }
        watchers[fd] = ready
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | EPOLLONESHOT.rawValue | (writable ? EPOLLOUT.rawValue : 0)
        event.data.fd = fd
        if watched.insert(fd).inserted {
            _ = epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event)
        } else {
            _ = epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
        }
    }

    /// Stops watching `fd`, before it closes (its number may next be an HTTP connection's).
    ///
    /// Off the loop's thread it does nothing: the loop has stopped (its jobs run on a serial queue, as a database
    /// connection's isolated deinit may), and cleared what it watched before any job could run there.
    public func forget(_ fd: Int32) {
        guard isCurrent else { return }
        watchers[fd] = nil
        guard watched.remove(fd) != nil else { return }
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
    }
}
