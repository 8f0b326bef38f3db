import Dispatch
import Foundation
import Glibc
import HTTP
import Registry
import Testing
import TokenRegistryTesting

@testable import API

/// A loopback TCP server that answers every connection with `reply` (or never answers), for the delivery client's
/// limits. It never leaves the machine.
final class RawTCPServer: @unchecked Sendable {
    // @unchecked Sendable: `fd` is written once in init; `accepted` is only touched under its own lock.
    let fd: Int32
    let port: Int
    private let lock = NSLock()
    private var connections = 0

    /// - Parameter endless: send `reply` again and again until the client goes away (a peer that never stops talking).
    init(reply: [UInt8]?, endless: Bool = false) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) }
        }
        guard bound == 0, listen(listener, 16) == 0 else {
            close(listener)
            throw POSIXError(.EADDRINUSE)
        }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        fd = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [weak self] in
            while true {
                let client = accept(listener, nil, nil)
                guard client >= 0 else { return }
                self?.lock.withLock { self?.connections += 1 }
                // A thread of its own: a silent server's five seconds on Dispatch's global queue would hold up every
                // Task.sleep of the test process (docs/security.md, class 16).
                Thread.detachNewThread {
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    _ = recv(client, &buffer, buffer.count, 0)
                    if let reply {
                        repeat {
                            let sent = reply.withUnsafeBytes {
                                send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                            }
                            if sent <= 0 { break }
                        } while endless
                        close(client)
                    } else {
                        Thread.sleep(forTimeInterval: 5)
                        close(client)
                    }
                }
            }
        }
    }

    var accepted: Int { lock.withLock { connections } }

    deinit {
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
    }
}

@Suite("Linked services cannot be aimed inside", .enabled(if: TestDatabase.isAvailable))
struct EndpointSecurityTests {
    @Test(arguments: [
        "http://127.0.0.1:5432/", "http://127.1/", "http://2130706433/", "http://0x7f000001/", "http://[::1]:8080/",
        "http://[::ffff:127.0.0.1]/", "http://169.254.169.254/latest/meta-data", "http://10.1.2.3/",
        "https://192.168.0.10/", "http://172.20.0.2/", "http://100.64.1.1/", "http://0.0.0.0/", "http://224.0.0.1/",
        "http://[fd00::1]/", "http://[fe80::1]/", "http://localhost:8080/hook",
    ])
    func internalEndpointsAreRefusedAtRegistration(_ endpoint: String) async throws {
        try await TestService.with(configure: { $0.deletionPolicy.endpoints.allowPrivate = false }) { s in
            let reply = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/linkedServices", headers: s.serverHeaders,
                json: ["name": "probe", "endpoint": .string(endpoint)])
            #expect(reply.status == 400, "\(endpoint): \(reply)")
            #expect(reply.json?["error"]?["message"]?.stringValue?.hasPrefix("endpoint") == true)
        }
    }

    @Test func aPublicEndpointIsAcceptedAndNothingIsSentAtRegistration() async throws {
        try await TestService.with(configure: { $0.deletionPolicy.endpoints.allowPrivate = false }) { s in
            // An address literal: registration checks it, and sends nothing anywhere.
            let reply = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/linkedServices", headers: s.serverHeaders,
                json: ["name": "crm", "endpoint": "https://93.184.216.34/hooks/deletions"])
            #expect(reply.status == 200, "\(reply)")
        }
    }

    @Test func deliveriesConnectOnlyToTheAddressThatWasChecked() async throws {
        let receiver = try RawTCPServer(reply: Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".utf8))
        // The name resolved to a public address when the service was registered; now it resolves inside.
        let rebinding = StaticResolver(["rebind.example": [.v4(0x7f00_0001)]])
        let transport = SocketDeliveryTransport(policy: EndpointPolicy(), resolver: rebinding)
        let result = await transport.post(
            endpoint: "http://rebind.example:\(receiver.port)/hook", body: [], headers: [], project: "p")
        #expect(result == .failed("refused destination (not a public address)"))
        let literal = await transport.post(endpoint: "http://127.0.0.1:\(receiver.port)/hook", body: [], headers: [], project: "p")
        #expect(literal == .failed("refused destination (not a public address)"))
        #expect(receiver.accepted == 0)
        // Allowed for tests and development, it is delivered.
        let open = SocketDeliveryTransport(policy: EndpointPolicy(allowPrivate: true), resolver: rebinding)
        #expect(
            await open.post(endpoint: "http://rebind.example:\(receiver.port)/hook", body: [], headers: [], project: "p")
                == .status(200))
        #expect(receiver.accepted == 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func redirectsOversizedAndSilentAnswersAreFailures() async throws {
        let open = SocketDeliveryTransport(policy: EndpointPolicy(allowPrivate: true), timeout: .seconds(5))
        let impatient = SocketDeliveryTransport(policy: EndpointPolicy(allowPrivate: true), timeout: .seconds(1))
        let redirect = try RawTCPServer(
            reply: Array("HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\nContent-Length: 0\r\n\r\n".utf8))
        #expect(
            await open.post(endpoint: "http://127.0.0.1:\(redirect.port)/", body: [], headers: [], project: "p")
                == .failed("redirect refused (HTTP 302)"))
        // A megabyte with no status line: at most 64 KiB is read, and it is a malformed answer.
        let flood = try RawTCPServer(reply: [UInt8](repeating: 0x41, count: 1 << 20))
        #expect(
            await open.post(endpoint: "http://127.0.0.1:\(flood.port)/", body: [], headers: [], project: "p")
                == .failed("malformed response"))
        // A status line then a huge body: the status counts, the body is not read.
        let big = try RawTCPServer(
            reply: Array("HTTP/1.1 202 Accepted\r\nContent-Length: 1048576\r\n\r\n".utf8)
                + [UInt8](repeating: 0x42, count: 1 << 20))
        #expect(await open.post(endpoint: "http://127.0.0.1:\(big.port)/", body: [], headers: [], project: "p") == .status(202))
        // An answer that never comes: the attempt ends at its time limit.
        let silent = try RawTCPServer(reply: nil)
        let started = ContinuousClock.now
        #expect(
            await impatient.post(endpoint: "http://127.0.0.1:\(silent.port)/", body: [], headers: [], project: "p")
                == .failed("timed out")
        )
        #expect(ContinuousClock.now - started < .seconds(3))
        // Interim answers: a few are skipped, more than eight are a malformed answer, and a peer that sends them
        // without end (as fast as they are read) is cut by that count well within the time limit.
        let interim = Array("HTTP/1.1 100 \r\n\r\n".utf8)
        func interimThenAccepted(_ head: [UInt8], _ count: Int) async throws -> DeliveryResponse {
            let peer = try RawTCPServer(
                reply: Array(repeating: head, count: count).flatMap { $0 }
                    + Array("HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n".utf8))
            return await open.post(endpoint: "http://127.0.0.1:\(peer.port)/", body: [], headers: [], project: "p")
        }
        #expect(try await interimThenAccepted(interim, 2) == .status(202))
        #expect(try await interimThenAccepted(interim, 9) == .failed("malformed response"))
        // Eight interim answers of 9 KiB each pass the answer's 64 KiB: every byte counts, skipped heads too.
        let bulky = Array(
            ("HTTP/1.1 103 Early Hints\r\nLink: <" + String(repeating: "a", count: 9 * 1024) + ">\r\n\r\n").utf8)
        #expect(try await interimThenAccepted(bulky, 8) == .failed("malformed response"))
        for head in [interim, Array("HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n".utf8)] {
            let endless = try RawTCPServer(reply: Array(repeating: head, count: 64).flatMap { $0 }, endless: true)
            let began = ContinuousClock.now
            #expect(
                await open.post(endpoint: "http://127.0.0.1:\(endless.port)/", body: [], headers: [], project: "p")
                    == .failed("malformed response"))
            #expect(ContinuousClock.now - began < .seconds(4))
        }
        // Nothing listening.
        let closedPort = ServiceProcess.freePort()
        #expect(
            await open.post(endpoint: "http://127.0.0.1:\(closedPort)/", body: [], headers: [], project: "p")
                == .failed("connection failed"))
    }

    @Test func theReceiptSaysWhatClassOfFailureItWas() async throws {
        let redirect = try RawTCPServer(
            reply: Array("HTTP/1.1 301 Moved\r\nLocation: http://10.0.0.1/secret\r\nContent-Length: 0\r\n\r\n".utf8))
        try await TestService.with { s in
            _ = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/linkedServices", headers: s.serverHeaders,
                json: ["name": "crm", "endpoint": .string("http://127.0.0.1:\(redirect.port)/hook")])
            let i = try await s.createInstallation()
            _ = try await s.request(
                "DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)", headers: s.serverHeaders)
            _ = try await s.app.jobs.deliverDue()
            let receipt = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/deletions/\(i.fid)", headers: s.serverHeaders)
            let error = receipt.json?["services"]?.arrayValue?.first?["lastError"]?.stringValue
            #expect(error == "redirect refused (HTTP 301)", "\(receipt)")
        }
    }
}
