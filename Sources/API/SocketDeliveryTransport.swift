import Crypto
import Dispatch
import Foundation
import Glibc
import Registry
import Synchronization

/// Posts deletion notices over sockets of its own, so that what is checked is what is connected to: the endpoint's
/// host is resolved, every address is checked (``EndpointPolicy``), and the connection goes to a checked address
/// (no second resolution for an attacker's DNS to answer differently). Redirects are not followed (a 3xx is a
/// failed attempt); at most 64 KiB of an answer is read, and only its status line is kept; each attempt has a total
/// time limit. A failure says what class of failure it was, never the peer's details.
public struct SocketDeliveryTransport: DeliveryTransport {
    public static let maxResponseBytes = 64 * 1024
    let policy: EndpointPolicy
    let resolver: any HostResolver
    let timeout: Duration
    let trustAnchors: String?

    /// `trustAnchors`: a PEM file of the certificate authorities https endpoints must chain to (default: the system's
    /// trust store, or `SSL_CERT_FILE`).
    public init(
        policy: EndpointPolicy, resolver: any HostResolver = SystemResolver(), timeout: Duration = .seconds(10),
        trustAnchors: String? = nil
    ) {
        self.policy = policy
        self.resolver = resolver
        self.timeout = timeout
        self.trustAnchors = trustAnchors
    }

    public func post(endpoint: String, body: [UInt8], headers: [(String, String)], project: String) async
        -> DeliveryResponse
    {
        let started = ContinuousClock.now
        let target: Endpoint
        let addresses: [IPAddress]
        do {
            target = try Endpoint(endpoint)
            addresses = try await policy.addresses(of: target, resolver: resolver, for: project)
        } catch let error as RegistryError where error.kind == .invalidArgument {
            return .failed("refused destination (not a public address)")
        } catch {
            return .failed("name resolution failed")
        }
        let remaining = timeout - (ContinuousClock.now - started)
        guard remaining > .zero else { return .failed("timed out") }
        // Endpoint admits only RFC 3986 bytes in the target and host, and the headers are the registry's own: nothing
        // here can end the request line or a header early.
        var request = "POST \(target.target) HTTP/1.1\r\nHost: \(target.hostHeader)"
        request += "\r\nUser-Agent: token-registry\r\nConnection: close\r\nContent-Length: \(body.count)\r\n"
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        let bytes = Array((request + "\r\n").utf8) + body
        return await withCheckedContinuation { continuation in
            // A queue of its own: the exchange blocks until its deadline at worst (docs/security.md, class 16).
            DispatchQueue(label: "delivery.send").async {
                continuation.resume(
                    returning: OutboundRequest.send(
                        bytes, to: addresses, endpoint: target, deadline: OutboundRequest.deadline(after: remaining),
                        trustAnchors: trustAnchors))
            }
        }
    }
}

/// One blocking HTTP/1.1 exchange, run on a Dispatch queue of its own.
enum OutboundRequest {
    /// `CLOCK_MONOTONIC` in nanoseconds, the clock every deadline here (and `TLSClient`'s) is on.
    static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    static func deadline(after duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return monotonicNanoseconds() + UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }

    static func millisecondsLeft(_ deadline: UInt64) -> Int32? {
        let nanos = monotonicNanoseconds()
        guard nanos < deadline else { return nil }
        return Int32(min(1000, (deadline - nanos) / 1_000_000 + 1))
    }

    static func send(
        _ request: [UInt8], to addresses: [IPAddress], endpoint: Endpoint, deadline: UInt64, trustAnchors: String?
    ) -> DeliveryResponse {
        var lastFailure = "connection failed"
        for address in addresses {
            let fd: Int32
            switch connect(address, port: endpoint.port, deadline: deadline) {
            case let .success(socket): fd = socket
            case let .failure(failure):
                lastFailure = failure.reason
                if failure.reason == "timed out" { return .failed(failure.reason) }
                continue
            }
            defer { close(fd) }
            if endpoint.scheme == "https" {
                do {
                    let tls = try TLSClient(
                        fd: fd, serverName: endpoint.host, deadline: deadline, trustAnchors: trustAnchors)
                    try tls.write(request)
                    return status(deadline: deadline) { try tls.read(upTo: 16 * 1024) }
                } catch let error as CryptoError {
                    return .failed(error.reason.hasSuffix("timed out") ? "timed out" : "TLS failed")
                } catch {
                    return .failed("TLS failed")
                }
            }
            guard write(request, to: fd, deadline: deadline) else { return .failed("connection failed while sending") }
            return status(deadline: deadline) { try read(from: fd, deadline: deadline) }
        }
        return .failed(lastFailure)
    }

    /// The most interim (1xx) answers read before the final one.
    static let maxInterimAnswers = 8

    /// Reads until the final status line; redirects are failures, 1xx answers are skipped (at most
    /// ``maxInterimAnswers``). Every byte the peer sends counts against ``maxResponseBytes``, interim heads included,
    /// and the deadline is checked before each read: a peer that answers `100 Continue` without end, as fast as it is
    /// read, held a delivery (and the jobs run waiting for it, every project's) for ever, since neither the skipped
    /// heads nor a read that never waits reached a bound.
    static func status(deadline: UInt64, _ read: () throws -> [UInt8]) -> DeliveryResponse {
        var received: [UInt8] = []
        var total = 0
        var interim = 0
        while total < SocketDeliveryTransport.maxResponseBytes {
            guard millisecondsLeft(deadline) != nil else { return .failed("timed out") }
            let chunk: [UInt8]
            do {
                chunk = try read()
            } catch let failure as ConnectFailure {
                return .failed(failure.reason)
            } catch let error as CryptoError where !error.reason.hasSuffix("timed out") {
                return .failed("TLS failed")
            } catch {
                return .failed("timed out")
            }
            if chunk.isEmpty { break }
            let kept = chunk.prefix(SocketDeliveryTransport.maxResponseBytes - total)
            total += kept.count
            received += kept
            while let lineEnd = received.firstIndex(of: 0x0a) {
                let line = String(decoding: received[..<lineEnd], as: UTF8.self)
                let parts = line.split(separator: " ", maxSplits: 2)
                guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let code = Int(parts[1]),
                    (100...599).contains(code)
                else { return .failed("malformed response") }
                if (100..<200).contains(code) {
                    // An interim answer: skip to the end of its head, then read the final one.
                    guard let headEnd = headEnd(received) else { break }
                    interim += 1
                    guard interim <= maxInterimAnswers else { return .failed("malformed response") }
                    received.removeFirst(headEnd)
                    continue
                }
                if (300..<400).contains(code) { return .failed("redirect refused (HTTP \(code))") }
                return .status(code)
            }
        }
        return .failed(received.isEmpty ? "no response" : "malformed response")
    }

    static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4) where bytes[i..<i + 4].elementsEqual([13, 10, 13, 10]) { return i + 4 }
        return nil
    }

    static func connect(_ address: IPAddress, port: Int, deadline: UInt64) -> Result<Int32, ConnectFailure> {
        var storage = sockaddr_storage()
        let length = Sockaddr.fill(&storage, address, port: port)
        let fd = socket(
            Int32(storage.ss_family),
            Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
                | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return .failure(ConnectFailure("connection failed")) }
        let started = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, length) }
        }
        if started != 0 && errno != EINPROGRESS {
            close(fd)
            return .failure(ConnectFailure("connection failed"))
        }
        if started != 0 {
            var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            while true {
                guard let wait = millisecondsLeft(deadline) else {
                    close(fd)
                    return .failure(ConnectFailure("timed out"))
                }
                if poll(&pfd, 1, wait) > 0 { break }
            }
            var error: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size)
            guard error == 0 else {
                close(fd)
                return .failure(ConnectFailure("connection failed"))
            }
        }
        return .success(fd)
    }

    struct ConnectFailure: Error, Equatable {
        let reason: String
        init(_ reason: String) { self.reason = reason }
    }

    static func write(_ bytes: [UInt8], to fd: Int32, deadline: UInt64) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if n > 0 {
                offset += n
            } else if n < 0 && (errno == EAGAIN || errno == EINTR) {
                guard let wait = millisecondsLeft(deadline) else { return false }
                var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                _ = poll(&pfd, 1, wait)
            } else {
                return false
            }
        }
        return true
    }

    struct TimedOut: Error {}

    static func read(from fd: Int32, deadline: UInt64) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n > 0 { return Array(buffer.prefix(n)) }
            if n == 0 { return [] }
            guard errno == EAGAIN || errno == EINTR else { throw ConnectFailure("connection reset") }
            guard let wait = millisecondsLeft(deadline) else { throw TimedOut() }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&pfd, 1, wait)
        }
    }
}

/// Socket address conversions.
enum Sockaddr {
    static func ip(_ address: UnsafeMutablePointer<sockaddr>?) -> IPAddress? {
        guard let address else { return nil }
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                .v4(UInt32(bigEndian: $0.pointee.sin_addr.s_addr))
            }
        case AF_INET6:
            return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                .v6(withUnsafeBytes(of: $0.pointee.sin6_addr) { Array($0) })
            }
        default: return nil
        }
    }

    static func fill(_ storage: inout sockaddr_storage, _ address: IPAddress, port: Int) -> socklen_t {
        switch address {
        case let .v4(a):
            return withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                    sin.pointee.sin_family = sa_family_t(AF_INET)
                    sin.pointee.sin_port = in_port_t(UInt16(port).bigEndian)
                    sin.pointee.sin_addr.s_addr = a.bigEndian
                    return socklen_t(MemoryLayout<sockaddr_in>.size)
                }
            }
        case let .v6(bytes):
            return withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin in
                    sin.pointee.sin6_family = sa_family_t(AF_INET6)
                    sin.pointee.sin6_port = in_port_t(UInt16(port).bigEndian)
                    withUnsafeMutableBytes(of: &sin.pointee.sin6_addr) { $0.copyBytes(from: bytes) }
                    return socklen_t(MemoryLayout<sockaddr_in6>.size)
                }
            }
        }
    }
}
