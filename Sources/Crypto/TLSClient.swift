import COpenSSL
import Glibc

/// A TLS client session over a connected, non-blocking socket: TLS 1.2 or later, the peer's certificate verified
/// against the system's trust store (or `SSL_CERT_FILE` / `SSL_CERT_DIR`, as OpenSSL reads them) and its name
/// matched against `serverName`, which is also sent as SNI. Every operation waits at most until `deadline` (a
/// `CLOCK_MONOTONIC` time in nanoseconds).
///
/// Not `Sendable`: one thread drives it from start to end (it runs on a Dispatch thread, never the cooperative pool).
public final class TLSClient {
    private let context: OpaquePointer
    private let ssl: OpaquePointer
    private let fd: Int32
    private let deadline: UInt64

    /// Connects TLS on `fd` and verifies the peer.
    ///
    /// - Throws: ``CryptoError`` when the handshake fails, the certificate does not verify or time runs out.
    /// `trustAnchors`, when set, is a PEM file of the only certificate authorities trusted (instead of the system's).
    public init(fd: Int32, serverName: String, deadline: UInt64, trustAnchors: String? = nil) throws {
        guard let method = TLS_client_method(), let context = SSL_CTX_new(method) else {
            throw CryptoError(.invalidKey, "TLS context failed")
        }
        self.context = context
        self.fd = fd
        self.deadline = deadline
        _ = shim_SSL_CTX_require_tls12(context)
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        let trusted =
            if let trustAnchors {
                SSL_CTX_load_verify_locations(context, trustAnchors, nil)
            } else {
                SSL_CTX_set_default_verify_paths(context)
            }
        guard trusted == 1, let ssl = SSL_new(context) else {
            SSL_CTX_free(context)
            throw CryptoError(.invalidKey, "TLS trust store failed")
        }
        self.ssl = ssl
        SSL_set_fd(ssl, fd)
        // The certificate must name the host (a literal address is matched as an IP address).
        // Each call's result is checked: an identity that was not set would let any trusted certificate pass.
        let identitySet: Bool
        if serverName.contains(":") || serverName.allSatisfy({ $0.isNumber || $0 == "." }) {
            identitySet = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), serverName) == 1
        } else {
            identitySet = SSL_set1_host(ssl, serverName) == 1 && shim_SSL_set_tlsext_host_name(ssl, serverName) == 1
        }
        guard identitySet else { throw CryptoError(.invalidKey, "the TLS peer identity could not be set") }
        try drive("TLS handshake") { SSL_connect(ssl) }
        guard SSL_get_verify_result(ssl) == X509_V_OK else { throw CryptoError(.invalidKey, "certificate not trusted") }
    }

    deinit {
        SSL_free(ssl)
        SSL_CTX_free(context)
    }

    /// Writes all of `bytes`.
    public func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            var written = 0
            try drive("TLS write") {
                bytes.withUnsafeBytes { SSL_write_ex(ssl, $0.baseAddress! + offset, bytes.count - offset, &written) }
            }
            offset += written
        }
    }

    /// Reads up to `count` bytes; an empty result means the peer closed.
    public func read(upTo count: Int) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        var read = 0
        do {
            try drive("TLS read") { SSL_read_ex(ssl, &buffer, count, &read) }
        } catch let error as CryptoError where error.reason == "closed" {
            return []
        }
        return Array(buffer.prefix(read))
    }

    /// Runs an SSL call until it succeeds, waiting on the socket when it wants to read or write.
    private func drive(_ what: String, _ call: () -> Int32) throws {
        while true {
            let result = call()
            if result == 1 { return }
            let error = SSL_get_error(ssl, result)
            var events: Int16
            switch error {
            case SSL_ERROR_WANT_READ: events = Int16(POLLIN)
            case SSL_ERROR_WANT_WRITE: events = Int16(POLLOUT)
            case SSL_ERROR_ZERO_RETURN: throw CryptoError(.invalidKey, "closed")
            default:
                ERR_clear_error()
                throw CryptoError(.invalidKey, "\(what) failed")
            }
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let nowNanos = UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
            guard nowNanos < deadline else { throw CryptoError(.invalidKey, "\(what) timed out") }
            var pfd = pollfd(fd: fd, events: events, revents: 0)
            _ = poll(&pfd, 1, Int32(min(1000, (deadline - nowNanos) / 1_000_000 + 1)))
        }
    }
}
