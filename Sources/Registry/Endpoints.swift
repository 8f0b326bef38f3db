import Foundation

/// An IP address, as a linked-service endpoint's host names it or resolves to.
public enum IPAddress: Sendable, Equatable, CustomStringConvertible {
    case v4(UInt32)
    case v6([UInt8])

    /// A host as written in a URL, when it is an address literal, in every spelling `inet_aton` takes for IPv4
    /// (`127.1`, `2130706433`, `0x7f000001`, `0177.0.0.1`) and bracketed or bare IPv6 (`[::1]`,
    /// `[::ffff:127.0.0.1]`); nil for a name.
    public static func literal(_ host: String) -> IPAddress? {
        var text = host
        if text.hasPrefix("["), text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        if let zone = text.firstIndex(of: "%") { text = String(text[..<zone]) }
        var v6 = in6_addr()
        if text.contains(":"), inet_pton(AF_INET6, text, &v6) == 1 {
            return .v6(withUnsafeBytes(of: v6) { Array($0) })
        }
        // inet_aton is what resolvers and HTTP clients use on such hosts, so it decides what the host means.
        var v4 = in_addr()
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 < 0x80 }), inet_aton(text, &v4) != 0 else { return nil }
        return .v4(UInt32(bigEndian: v4.s_addr))
    }

    public var description: String {
        switch self {
        case let .v4(a): return "\(a >> 24).\(a >> 16 & 0xff).\(a >> 8 & 0xff).\(a & 0xff)"
        case let .v6(bytes):
            var storage = in6_addr()
            withUnsafeMutableBytes(of: &storage) { $0.copyBytes(from: bytes) }
            var buffer = [UInt8](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            buffer.withUnsafeMutableBufferPointer {
                $0.withMemoryRebound(to: CChar.self) {
                    _ = inet_ntop(AF_INET6, &storage, $0.baseAddress, socklen_t($0.count))
                }
            }
            return String(decoding: buffer.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
    }

    /// The IPv4 address an IPv6 one carries (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, NAT64
    /// `64:ff9b::a.b.c.d`), so it is judged as that address.
    var embeddedV4: UInt32? {
        guard case let .v6(b) = self, b.count == 16 else { return nil }
        let tail = UInt32(b[12]) << 24 | UInt32(b[13]) << 16 | UInt32(b[14]) << 8 | UInt32(b[15])
        let head = b[0..<10]
        if head.allSatisfy({ $0 == 0 }) && ((b[10] == 0xff && b[11] == 0xff) || (b[10] == 0 && b[11] == 0)) {
            return tail
        }
        if b[0] == 0x00, b[1] == 0x64, b[2] == 0xff, b[3] == 0x9b, b[4..<12].allSatisfy({ $0 == 0 }) { return tail }
        return nil
    }

    /// True for an address on the public internet: not loopback, private (RFC 1918), CGNAT, link-local,
    /// unique-local, unspecified, multicast, broadcast or otherwise reserved.
    public var isPublic: Bool {
        if let v4 = embeddedV4 {
            // `::` and `::1` are IPv6's own unspecified and loopback addresses, not IPv4 ones.
            if case let .v6(b) = self, b[10] == 0, b[11] == 0, v4 <= 1 { return false }
            return IPAddress.v4(v4).isPublic
        }
        switch self {
        case let .v4(a):
            func within(_ network: UInt32, _ bits: UInt32) -> Bool {
                let mask: UInt32 = bits == 0 ? 0 : ~UInt32(0) << (32 - bits)
                return a & mask == network & mask
            }
            let refused: [(UInt32, UInt32)] = [
                (0x0000_0000, 8),  // 0.0.0.0/8: unspecified, "this network"
                (0x0a00_0000, 8),  // 10/8
                (0x6440_0000, 10),  // 100.64/10: carrier-grade NAT
                (0x7f00_0000, 8),  // 127/8: loopback
                (0xa9fe_0000, 16),  // 169.254/16: link-local (cloud metadata)
                (0xac10_0000, 12),  // 172.16/12
                (0xc000_0000, 24),  // 192.0.0/24: IETF protocol assignments
                (0xc000_0200, 24),  // 192.0.2/24: documentation
                (0xc0a8_0000, 16),  // 192.168/16
                (0xc612_0000, 15),  // 198.18/15: benchmarking
                (0xc633_6400, 24),  // 198.51.100/24: documentation
                (0xcb00_7100, 24),  // 203.0.113/24: documentation
                (0xe000_0000, 4),  // 224/4: multicast
                (0xf000_0000, 4),  // 240/4: reserved, and broadcast
            ]
            return !refused.contains { within($0.0, $0.1) }
        case let .v6(b):
            if b.allSatisfy({ $0 == 0 }) { return false }  // ::
            if b[0..<15].allSatisfy({ $0 == 0 }) && b[15] == 1 { return false }  // ::1
            if b[0] == 0xff { return false }  // ff00::/8 multicast
            if b[0] & 0xfe == 0xfc { return false }  // fc00::/7 unique-local
            if b[0] == 0xfe && b[1] & 0xc0 == 0x80 { return false }  // fe80::/10 link-local
            if b[0] == 0xfe && b[1] & 0xc0 == 0xc0 { return false }  // fec0::/10 site-local (deprecated)
            if b[0] == 0x20, b[1] == 0x01, b[2] == 0x0d, b[3] == 0xb8 { return false }  // 2001:db8::/32 documentation
            return true
        }
    }
}

/// Resolves a host name to addresses (the domain does no I/O; the API provides the system's resolver).
public protocol HostResolver: Sendable {
    /// - Throws: when the name does not resolve.
    func resolve(_ host: String) async throws -> [IPAddress]
}

/// A linked service's endpoint, checked: an absolute http(s) URL whose host is not, and does not resolve to, an
/// address inside the network the service runs in, unless private targets are allowed (tests, development).
public struct Endpoint: Sendable, Equatable {
    public let scheme: String
    public let host: String
    public let port: Int
    /// Path and query, at least `/`.
    public let target: String

    /// Parses `text`.
    ///
    /// - Throws: `.invalidArgument` naming `endpoint`.
    public init(_ text: String) throws {
        guard text.utf8.count <= 2048, !text.contains(where: { $0 == " " || $0.isNewline }),
            let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = url.host, !host.isEmpty, url.user == nil, url.password == nil
        else { throw RegistryError.invalid("endpoint", "must be an absolute http(s) URL") }
        self.scheme = scheme
        self.host = host.lowercased()
        guard let port = url.port ?? (scheme == "https" ? 443 : 80) as Int?, (1...65535).contains(port) else {
            throw RegistryError.invalid("endpoint", "has no valid port")
        }
        self.port = port
        let path = url.path.isEmpty ? "/" : url.path
        target = url.query.map { path + "?" + $0 } ?? path
    }
}

/// Where deletion notices may go.
public struct EndpointPolicy: Sendable {
    /// Re-allows private, loopback and other internal addresses (`LINKED_SERVICE_ALLOW_PRIVATE=true`).
    public var allowPrivate = false
    /// When set, the only hosts endpoints may name (`LINKED_SERVICE_HOSTS`), checked before the addresses.
    public var allowedHosts: Set<String>?

    public init(allowPrivate: Bool = false, allowedHosts: Set<String>? = nil) {
        self.allowPrivate = allowPrivate
        self.allowedHosts = allowedHosts
    }

    /// Whether `address` may be connected to.
    public func permits(_ address: IPAddress) -> Bool { allowPrivate || address.isPublic }

    /// The addresses of `endpoint` that may be connected to, in the resolver's order; refuses an endpoint whose host
    /// is not allowed, or that is, or resolves to, any address inside (a name with one public and one private
    /// address is refused: which one a later resolution returns is the attacker's choice).
    ///
    /// - Throws: `.invalidArgument` naming `endpoint`.
    public func addresses(of endpoint: Endpoint, resolver: any HostResolver) async throws -> [IPAddress] {
        if let allowedHosts, !allowedHosts.contains(endpoint.host) {
            throw RegistryError.invalid("endpoint", "host \(endpoint.host.prefix(253)) is not in LINKED_SERVICE_HOSTS")
        }
        let addresses: [IPAddress]
        if let literal = IPAddress.literal(endpoint.host) {
            addresses = [literal]
        } else {
            addresses = try await resolver.resolve(endpoint.host)
        }
        guard !addresses.isEmpty, addresses.allSatisfy(permits) else {
            throw RegistryError.invalid(
                "endpoint",
                "the host is, or resolves to, a loopback, private, link-local, unique-local, CGNAT, unspecified or "
                    + "multicast address (LINKED_SERVICE_ALLOW_PRIVATE=true allows them, for tests and development)")
        }
        return addresses
    }
}
