import CLinuxShims
import Glibc

/// A system call that failed, with its errno.
public struct SocketError: Error, Sendable, CustomStringConvertible {
    public let call: String
    public let errno: Int32

    init(_ call: String, errno: Int32 = Glibc.errno) {
        self.call = call
        self.errno = errno
    }

    public var description: String { "\(call) failed: \(String(cString: strerror(errno)))" }
}

/// Thin wrappers over the socket calls the event loops use.
enum Socket {
    /// Opens a non-blocking listener with `SO_REUSEADDR`, on IPv4 or IPv6. An IPv6 listener also takes IPv4
    /// connections (`IPV6_V6ONLY` off), so `::` serves both families. Every event loop watches this one socket with
    /// `EPOLLEXCLUSIVE`, so the kernel wakes one loop per new connection. (No `SO_REUSEPORT`: a second process
    /// started on the same port must fail, not silently take half the traffic.)
    static func listen(host: String, port: Int, backlog: Int32) throws -> (fd: Int32, port: Int) {
        guard let address = SocketAddress(host: host, port: port) else {
            throw SocketError("inet_pton(\(host))", errno: EINVAL)
        }
        let fd = socket(
            address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue),
            0)
        guard fd >= 0 else { throw SocketError("socket") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if address.family == AF_INET6 {
            var off: Int32 = 0
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &off, socklen_t(MemoryLayout<Int32>.size))
        }
        let bound = address.withSockaddr { bind(fd, $0, $1) }
        guard bound == 0 else {
            let e = SocketError("bind(\(host):\(port))")
            close(fd)
            throw e
        }
        guard Glibc.listen(fd, backlog) == 0 else {
            let e = SocketError("listen")
            close(fd)
            throw e
        }
        var actual = sockaddr_storage()
        var actualLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &actualLength) }
        }
        return (fd, Socket.endpoint(of: &actual).port)
    }

    /// Accepts one pending connection; nil when none is pending. The remote address is `a.b.c.d:port` for IPv4
    /// (and for IPv4 clients of an IPv6 listener), `[v6]:port` for IPv6.
    static func accept(_ listener: Int32) throws -> (fd: Int32, remote: String)? {
        var address = sockaddr_storage()
        while true {
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let fd = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    accept4(listener, $0, &length, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
                }
            }
            if fd >= 0 {
                var one: Int32 = 1
                setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                let (host, port) = Socket.endpoint(of: &address)
                return (fd, host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
            }
            switch errno {
            case EINTR, ECONNABORTED: continue
            case EAGAIN, EWOULDBLOCK: return nil
            default: throw SocketError("accept4")
            }
        }
    }

    /// The address and port of a socket address; an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) reads as IPv4.
    static func endpoint(of storage: inout sockaddr_storage) -> (host: String, port: Int) {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let port: UInt16
        if Int32(storage.ss_family) == AF_INET6 {
            port = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address in
                    let bytes = withUnsafeBytes(of: address.pointee.sin6_addr) { Array($0) }
                    if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff {
                        var v4 = in_addr()
                        withUnsafeMutableBytes(of: &v4) { $0.copyBytes(from: bytes[12..<16]) }
                        inet_ntop(AF_INET, &v4, &text, socklen_t(text.count))
                    } else {
                        inet_ntop(AF_INET6, &address.pointee.sin6_addr, &text, socklen_t(text.count))
                    }
                    return UInt16(bigEndian: address.pointee.sin6_port)
                }
            }
        } else {
            port = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
                    inet_ntop(AF_INET, &address.pointee.sin_addr, &text, socklen_t(text.count))
                    return UInt16(bigEndian: address.pointee.sin_port)
                }
            }
        }
        return (String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self), Int(port))
    }

    /// Raises the soft open-file limit to the hard limit, so many idle connections fit.
    static func raiseFileLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    /// Milliseconds on the monotonic clock.
    static func monotonicMillis() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
    }
}
