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

    /// The IPv4 address an IPv6 one carries, so it is judged as that address: mapped `::ffff:a.b.c.d`, compatible
    /// `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d` (RFC 6052), and 6to4 `2002:aabb:ccdd::/48` (RFC 3056).
    var embeddedV4: UInt32? {
        guard case let .v6(b) = self, b.count == 16 else { return nil }
        func v4(_ at: Int) -> UInt32 {
            UInt32(b[at]) << 24 | UInt32(b[at + 1]) << 16 | UInt32(b[at + 2]) << 8 | UInt32(b[at + 3])
        }
        let head = b[0..<10]
        if head.allSatisfy({ $0 == 0 }) && ((b[10] == 0xff && b[11] == 0xff) || (b[10] == 0 && b[11] == 0)) {
            return v4(12)
        }
        if b[0] == 0x00, b[1] == 0x64, b[2] == 0xff, b[3] == 0x9b, b[4..<12].allSatisfy({ $0 == 0 }) { return v4(12) }
        if b[0] == 0x20, b[1] == 0x02 { return v4(2) }
        return nil
    }

    /// The IANA IPv4 Special-Purpose Address Registry's blocks that are not globally reachable, with multicast and
    /// the deprecated 6to4 relay anycast (RFC 7526): (network, prefix length).
    static let specialV4: [(UInt32, UInt32)] = [
        (0x0000_0000, 8),  // 0.0.0.0/8: "this network"
        (0x0a00_0000, 8),  // 10/8: private
        (0x6440_0000, 10),  // 100.64/10: shared address space (CGNAT)
        (0x7f00_0000, 8),  // 127/8: loopback
        (0xa9fe_0000, 16),  // 169.254/16: link-local (cloud metadata)
        (0xac10_0000, 12),  // 172.16/12: private
        (0xc000_0000, 24),  // 192.0.0/24: IETF protocol assignments
        (0xc000_0200, 24),  // 192.0.2/24: documentation (TEST-NET-1)
        (0xc058_6300, 24),  // 192.88.99/24: 6to4 relay anycast (deprecated)
        (0xc0a8_0000, 16),  // 192.168/16: private
        (0xc612_0000, 15),  // 198.18/15: benchmarking
        (0xc633_6400, 24),  // 198.51.100/24: documentation (TEST-NET-2)
        (0xcb00_7100, 24),  // 203.0.113/24: documentation (TEST-NET-3)
        (0xe000_0000, 4),  // 224/4: multicast
        (0xf000_0000, 4),  // 240/4: reserved, and 255.255.255.255 broadcast
    ]

    /// The IANA IPv6 Special-Purpose Address Registry's blocks that are not globally reachable (those that embed an
    /// IPv4 address are judged by it, ``embeddedV4``), with multicast and site-local: (prefix bytes, prefix length).
    static let specialV6: [([UInt8], Int)] = [
        ([0x00, 0x64, 0xff, 0x9b, 0x00, 0x01], 48),  // 64:ff9b:1::/48: local-use NAT64 (RFC 8215)
        ([0x01, 0x00, 0, 0, 0, 0, 0, 0], 64),  // 100::/64: discard-only
        ([0x20, 0x01, 0x00, 0x00], 23),  // 2001::/23: IETF protocol assignments, Teredo 2001::/32 among them
        ([0x20, 0x01, 0x0d, 0xb8], 32),  // 2001:db8::/32: documentation
        ([0x3f, 0xff], 20),  // 3fff::/20: documentation (RFC 9637)
        ([0x5f, 0x00], 16),  // 5f00::/16: SRv6 SIDs
        ([0xfc], 7),  // fc00::/7: unique-local
        ([0xfe, 0x80], 10),  // fe80::/10: link-local
        ([0xfe, 0xc0], 10),  // fec0::/10: site-local (deprecated)
        ([0xff], 8),  // ff00::/8: multicast
    ]

    /// True for an address on the public internet: none of the IANA special-purpose blocks that are not globally
    /// reachable (loopback, private, CGNAT, link-local, unique-local, documentation, benchmarking, unspecified,
    /// multicast, broadcast, reserved), in IPv4 or IPv6, and no IPv4 address embedded in IPv6 that is one of them.
    public var isPublic: Bool {
        if let v4 = embeddedV4 {
            // `::` and `::1` are IPv6's own unspecified and loopback addresses, not IPv4 ones.
            if case let .v6(b) = self, b[0] == 0, b[10] == 0, b[11] == 0, v4 <= 1 { return false }
            return IPAddress.v4(v4).isPublic
        }
        switch self {
        case let .v4(a):
            return !IPAddress.specialV4.contains { network, bits in
                let mask: UInt32 = bits == 0 ? 0 : ~UInt32(0) << (32 - bits)
                return a & mask == network & mask
            }
        case let .v6(b):
            guard b.count == 16 else { return false }
            return !IPAddress.specialV6.contains { prefix, bits in
                for bit in 0..<bits {
                    let byte = bit / 8
                    let mask = UInt8(0x80) >> UInt8(bit % 8)
                    let expected = byte < prefix.count ? prefix[byte] & mask : 0
                    if b[byte] & mask != expected { return false }
                }
                return true
            }
        }
    }
}

/// Resolves a host name to addresses (the domain does no I/O; the API provides the system's resolver).
public protocol HostResolver: Sendable {
    /// Resolves `host` on behalf of `owner` (a project): a resolver with a bounded number of look-ups at once gives
    /// each owner a share of them, so one project's slow names cannot hold every other project's look-ups up.
    ///
    /// - Throws: when the name does not resolve.
    func resolve(_ host: String, for owner: String) async throws -> [IPAddress]
}

/// A linked service's endpoint, checked: an absolute http(s) URL whose host is not, and does not resolve to, an
/// address inside the network the service runs in, unless private targets are allowed (tests, development).
///
/// Parsed by byte, by RFC 3986's grammar: every byte is one the RFC allows in a URL (unreserved, sub-delims, `:@/?`,
/// `%` with two hex digits), so nothing that could end a request line or a header (space, CR, LF, NUL, any control
/// or non-ASCII byte) can be in one. The path and query are kept exactly as written, percent-escapes and all: they are
/// what the request line carries. No user part, no fragment; the host is a name of letters, digits, hyphens and dots,
/// or an address literal (`[v6]`).
public struct Endpoint: Sendable, Equatable {
    public let scheme: String
    public let host: String
    public let port: Int
    /// Path and query, at least `/`, as written.
    public let target: String

    /// The `Host` header's value: the host, bracketed when it is IPv6, and the port when it is not the scheme's.
    public var hostHeader: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return port == (scheme == "https" ? 443 : 80) ? name : "\(name):\(port)"
    }

    /// Parses `text`.
    ///
    /// - Throws: `.invalidArgument` naming `endpoint`.
    public init(_ text: String) throws {
        func refuse(_ why: String) -> RegistryError { RegistryError.invalid("endpoint", why) }
        let bytes = Array(text.utf8)
        guard bytes.count <= 2048 else { throw refuse("longer than 2048 bytes") }
        var i = 0
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "%") {
                guard i + 2 < bytes.count, Endpoint.isHex(bytes[i + 1]), Endpoint.isHex(bytes[i + 2]) else {
                    throw refuse("has a '%' not followed by two hex digits")
                }
                i += 3
                continue
            }
            guard Endpoint.isURLByte(c) else {
                throw refuse("must be an absolute http(s) URL of RFC 3986 characters (percent-encode the others)")
            }
            i += 1
        }
        let lowered = text.lowercased()
        let rest: Substring
        if lowered.hasPrefix("https://") {
            scheme = "https"
            rest = text.dropFirst(8)
        } else if lowered.hasPrefix("http://") {
            scheme = "http"
            rest = text.dropFirst(7)
        } else {
            throw refuse("must be an absolute http(s) URL")
        }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        var target = String(rest[authorityEnd...])
        guard !target.contains("#") else { throw refuse("must not have a fragment") }
        guard !authority.contains("@") else { throw refuse("must not carry a user or password") }
        if target.isEmpty { target = "/" } else if target.hasPrefix("?") { target = "/" + target }
        self.target = target
        // The host: `[v6]`, or a name (or IPv4 literal) of letters, digits, hyphens and dots; then `:port`.
        var hostPart: Substring
        var portPart: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw refuse("has an unclosed '['") }
            hostPart = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw refuse("has no valid port") }
                portPart = after.dropFirst()
            }
            guard case .v6? = IPAddress.literal(String(hostPart)), !hostPart.contains("%") else {
                throw refuse("has an invalid IPv6 address")
            }
        } else {
            let colon = authority.firstIndex(of: ":")
            hostPart = authority[..<(colon ?? authority.endIndex)]
            if let colon { portPart = authority[authority.index(after: colon)...] }
            guard
                hostPart.utf8.allSatisfy({
                    Identifiers.isBase64URLChar($0) && $0 != UInt8(ascii: "_") || $0 == UInt8(ascii: ".")
                })
            else { throw refuse("has a host that is not a name or an address") }
        }
        guard !hostPart.isEmpty, hostPart.utf8.count <= 253 else { throw refuse("has no host") }
        host = hostPart.lowercased()
        if let portPart {
            guard (1...5).contains(portPart.utf8.count), portPart.utf8.allSatisfy({ (48...57).contains($0) }),
                let number = Int(portPart), (1...65535).contains(number)
            else { throw refuse("has no valid port") }
            port = number
        } else {
            port = scheme == "https" ? 443 : 80
        }
    }

    private static func isHex(_ c: UInt8) -> Bool {
        (48...57).contains(c) || (65...70).contains(c) || (97...102).contains(c)
    }

    /// RFC 3986's unreserved, sub-delims and `: @ / ? [ ] #` (gen-delims), as bytes.
    public static func isURLByte(_ c: UInt8) -> Bool {
        if (65...90).contains(c) || (97...122).contains(c) || (48...57).contains(c) { return true }
        return "-._~!$&'()*+,;=:@/?[]#".utf8.contains(c)
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
    public func addresses(of endpoint: Endpoint, resolver: any HostResolver, for owner: String) async throws
        -> [IPAddress]
    {
        if let allowedHosts, !allowedHosts.contains(endpoint.host) {
            throw RegistryError.invalid("endpoint", "host \(endpoint.host.prefix(253)) is not in LINKED_SERVICE_HOSTS")
        }
        let addresses: [IPAddress]
        if let literal = IPAddress.literal(endpoint.host) {
            addresses = [literal]
        } else {
            addresses = try await resolver.resolve(endpoint.host, for: owner)
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
