import Foundation
import Glibc
import Registry
import Testing
import TokenRegistryTesting

@testable import API

/// A one-shot HTTPS receiver (Python's `ssl` module, a certificate made by the `openssl` command for this run) on
/// loopback: it records the request it gets and answers 204.
final class TLSReceiver {
    let directory: String
    let pid: pid_t
    let port: Int

    /// `names`: the certificate's subjectAltName, e.g. `IP:127.0.0.1`.
    init(names: String) async throws {
        directory = NSTemporaryDirectory() + "tls-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try await shell(
            "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=receiver -addext subjectAltName=\(names) "
                + "-keyout '\(directory)/key.pem' -out '\(directory)/cert.pem'")
        try Self.script.write(toFile: directory + "/receiver.py", atomically: true, encoding: .utf8)
        let started = try await shell(
            "python3 '\(directory)/receiver.py' '\(directory)' >'\(directory)/port' 2>&1 </dev/null & echo $!")
        pid = pid_t(started.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        var port: Int?
        for _ in 0..<100 where port == nil {
            try await Task.sleep(for: .milliseconds(50))
            let text = (try? String(contentsOfFile: directory + "/port", encoding: .utf8)) ?? ""
            if text.hasSuffix("\n") { port = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
        guard let port, pid > 0 else {
            if pid > 0 { kill(pid, SIGKILL) }
            throw POSIXError(.ECHILD)  // the TLS receiver did not start
        }
        self.port = port
    }

    static let script = """
        import http.server, ssl, sys
        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                open(sys.argv[1] + "/received", "wb").write(self.headers["X-Probe"].encode() + b"|" + body)
                self.send_response(204); self.end_headers()
            def log_message(self, *a): pass
        server = http.server.HTTPServer(("127.0.0.1", 0), H)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[1] + "/cert.pem", sys.argv[1] + "/key.pem")
        server.socket = context.wrap_socket(server.socket, server_side=True)
        print(server.server_address[1], flush=True)
        while True:
            try: server.handle_request()
            except Exception: pass
        """

    var certificate: String { directory + "/cert.pem" }
    var received: String? { try? String(contentsOfFile: directory + "/received", encoding: .utf8) }

    deinit {
        kill(pid, SIGKILL)
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Deletion notices over https: the certificate must chain to a trusted authority and name the host.
@Suite("Deliveries over TLS")
struct TLSDeliveryTests {
    let open = EndpointPolicy(allowPrivate: true)

    @Test func aTrustedCertificateNamingTheHostGetsTheNotice() async throws {
        let receiver = try await TLSReceiver(names: "IP:127.0.0.1")
        let transport = SocketDeliveryTransport(policy: open, trustAnchors: receiver.certificate)
        let result = await transport.post(
            endpoint: "https://127.0.0.1:\(receiver.port)/hook", body: Array("{\"fid\":\"f\"}".utf8),
            headers: [("X-Probe", "signed")], project: "p")
        #expect(result == .status(204))
        #expect(receiver.received == "signed|{\"fid\":\"f\"}")
    }

    @Test func anUntrustedCertificateIsRefused() async throws {
        let receiver = try await TLSReceiver(names: "IP:127.0.0.1")
        // The system's trust store does not hold this run's self-signed certificate.
        let transport = SocketDeliveryTransport(policy: open)
        let result = await transport.post(endpoint: "https://127.0.0.1:\(receiver.port)/hook", body: [], headers: [], project: "p")
        #expect(result == .failed("TLS failed"))
        #expect(receiver.received == nil)
    }

    @Test func aCertificateForAnotherNameIsRefused() async throws {
        let receiver = try await TLSReceiver(names: "DNS:elsewhere.example")
        let transport = SocketDeliveryTransport(policy: open, trustAnchors: receiver.certificate)
        let result = await transport.post(endpoint: "https://127.0.0.1:\(receiver.port)/hook", body: [], headers: [], project: "p")
        #expect(result == .failed("TLS failed"))
        #expect(receiver.received == nil)
    }
}
