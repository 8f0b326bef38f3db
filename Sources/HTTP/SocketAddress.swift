import CLinuxShims
import Glibc

/// An IPv4 or IPv6 address literal with a port, as the socket calls take it. `[…]` around IPv6 is allowed, and
/// `localhost` is 127.0.0.1. The listener, the probe and the tests' raw client all build their addresses here.
public struct SocketAddress {
    public let family: Int32
    var storage = sockaddr_storage()
    let length: socklen_t

    public init?(host: String, port: Int) {
        var text = host == "localhost" ? "127.0.0.1" : host
        if text.hasPrefix("["), text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        guard let port = UInt16(exactly: port) else { return nil }
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            family = AF_INET
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                    $0.pointee.sin_family = sa_family_t(AF_INET)
                    $0.pointee.sin_port = in_port_t(port.bigEndian)
                    $0.pointee.sin_addr = v4
                }
            }
        } else if inet_pton(AF_INET6, text, &v6) == 1 {
            family = AF_INET6
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    $0.pointee.sin6_family = sa_family_t(AF_INET6)
                    $0.pointee.sin6_port = in_port_t(port.bigEndian)
                    $0.pointee.sin6_addr = v6
                }
            }
        } else {
            return nil
        }
    }

    /// Calls `body` with the address as a `sockaddr` pointer and its length (for `bind` and `connect`).
    public func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) throws -> R) rethrows -> R {
        try withUnsafePointer(to: storage) {
            try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, length) }
        }
    }
}
