import Foundation
import JSON
import Postgres
import Registry
import Testing
import TokenRegistryTesting

@testable import API

/// Classes of hostile input, live: a real server on port 0 against PostgreSQL, over sockets. Each fails on the code
/// before its fix (docs/security.md).
@Suite("Hostile input, live", .enabled(if: TestDatabase.isAvailable))
struct HostileInputTests {
    /// The holes the issue found, as requests: none may answer 5xx or stop the replica, and none may change the
    /// real linked service or another tenant's deliveries.
    @Test func theFoundHolesAreClosed() async throws {
        let receiver = try Receiver(statuses: [])
        try await TestService.with { s in
            let created = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/linkedServices", headers: s.serverHeaders,
                json: ["name": "crm", "endpoint": .string(receiver.endpoint)])
            receiver.setSecret(try #require(created.json?["secret"]?.stringValue))
            let i = try await s.createInstallation()
            let ack = "/v1/projects/\(s.project.id)/deletions/\(i.fid)/acks/crm"
            for t in ["-9223372036854775808", "9223372036854775807", "-1", "99999999999999999999"] {
                let reply = try await s.request(
                    "POST", ack, headers: ["Registry-Signature": "t=\(t),v1=" + String(repeating: "0", count: 64)],
                    body: Array("{\"deliveryId\":\"x\"}".utf8))
                #expect(reply.status == 401, "t=\(t): \(reply)")
            }
            for name in ["crm%00", "crm%00x", "crm%0A", "crm%0D%0AX:%201"] {
                let reply = try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/linkedServices/\(name):rotateSecret", headers: s.serverHeaders)
                #expect(reply.status == 400, "\(name): \(reply)")
            }
            #expect(try await s.request("GET", "/healthz").status == 200)
            // The real service's secret still opens: its notice is signed with it and delivered.
            _ = try await s.request("DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)", headers: s.serverHeaders)
            let report = try await s.app.jobs.run()
            #expect(report.failed.isEmpty, "\(report.failed)")
            #expect(receiver.notices.last?.signatureValid == true)
        }
        await receiver.server.shutdown(drainTimeout: 1)
    }

    /// A secret that does not open (sealed under another key, corrupted) fails its own delivery, recorded on it; the
    /// other project's deletion is delivered in the same run, and the purge runs.
    @Test func oneUnopenableSecretStopsNoOtherProjectsDeletion() async throws {
        let broken = try Receiver(statuses: [])
        let healthy = try Receiver(statuses: [])
        try await TestService.with { s in
            let other = try await s.addProject(id: "other-proj", number: 77_777)
            for (project, key, receiver) in [(s.project.id, s.serverKey, broken), (other.project.id, other.serverKey, healthy)] {
                let created = try await s.request(
                    "POST", "/v1/projects/\(project)/linkedServices", headers: ["Authorization": "Bearer \(key)"],
                    json: ["name": "crm", "endpoint": .string(receiver.endpoint)])
                #expect(created.status == 200, "\(created)")
                receiver.setSecret(created.json?["secret"]?.stringValue ?? "")
            }
            let mine = try await s.createInstallation()
            let theirs = try await s.createInstallation(project: other.project, app: other.app)
            _ = try await s.request("DELETE", "/v1/project/\(s.project.id)/instanceId/\(mine.fid)", headers: s.serverHeaders)
            _ = try await s.request(
                "DELETE", "/v1/project/\(other.project.id)/instanceId/\(theirs.fid)",
                headers: ["Authorization": "Bearer \(other.serverKey)"])
            try await s.pool.query(
                "UPDATE linked_services SET secret = 'enc1:not-a-sealed-secret' WHERE project_id = \(s.project.id)")
            let report = try await s.app.jobs.run()
            #expect(report.failed.isEmpty, "\(report.failed)")
            // At least once: on a slow machine the drain outlasts the first back-off (about 1 s) and retries it.
            #expect((report.unitFailures["deliver"] ?? 0) >= 1)
            #expect(report.processed["purge"] != nil)
            #expect(healthy.notices.count == 1 && healthy.notices.first?.signatureValid == true)
            #expect(broken.notices.isEmpty)
            let receipt = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/deletions/\(mine.fid)", headers: s.serverHeaders)
            #expect(receipt.json?["services"]?.arrayValue?.first?["lastError"]?.stringValue?.contains("SECRETS_KEY") == true)
            let theirsReceipt = try await s.request(
                "GET", "/v1/projects/\(other.project.id)/deletions/\(theirs.fid)",
                headers: ["Authorization": "Bearer \(other.serverKey)"])
            #expect(theirsReceipt.json?["state"]?.stringValue == "done")
        }
        await broken.server.shutdown(drainTimeout: 1)
        await healthy.server.shutdown(drainTimeout: 1)
    }

    /// A stranger cannot tell a known project from an unknown one: every route answers both the same, whatever
    /// credentials come with the request.
    @Test func knownAndUnknownProjectsAnswerAStrangerAlike() async throws {
        try await TestService.with { s in
            let other = try await s.addProject(id: "other-proj", number: 88_888)
            let stranger = try await s.createInstallation(project: other.project, app: other.app)
            // The known project has the service the routes name; the unknown ones cannot.
            #expect(
                try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/linkedServices", headers: s.serverHeaders,
                    json: ["name": "crm", "endpoint": "https://crm.example/hook"]
                ).status == 200)
            let fid = stranger.fid
            let credentials: [[String: String]] = [
                [:], ["Authorization": "Bearer \(other.serverKey)"], ["Authorization": "Bearer trs_not-a-key"],
                ["x-goog-api-key": other.app.apiKey], ["x-goog-api-key": "AIzaSyNotAKeyOfThisServiceAtAll000000000"],
                ["Authorization": "FIS_v2 \(stranger.refreshToken)", "x-goog-api-key": other.app.apiKey],
                ["Authorization": "FIS_v2 \(stranger.refreshToken)"],
                ["x-goog-firebase-installations-auth": "FIS \(stranger.authToken)"],
                ["Registry-Signature": "t=1,v1=" + String(repeating: "0", count: 64)],
            ]
            let routes: [(String, String)] = [
                ("POST", "installations"), ("POST", "installations/\(fid)/authTokens:generate"),
                ("DELETE", "installations/\(fid)"), ("GET", "installations/\(fid)/consent"),
                ("PUT", "installations/\(fid)/registration"), ("POST", "registrations"),
                ("GET", "topics/news/registrations"), ("GET", "linkedServices"),
                ("POST", "linkedServices/crm:rotateSecret"), ("POST", "deletions/\(fid)/acks/crm"),
                ("GET", "events"), ("POST", "targets:resolve"),
            ]
            for (method, route) in routes {
                for headers in credentials {
                    var answers: [String] = []
                    for project in [s.project.id, "ghost-proj", String(s.project.number), "987654321"] {
                        let reply = try await s.request(
                            method, "/v1/projects/\(project)/\(route)", headers: headers,
                            body: Array("{}".utf8))
                        answers.append("\(reply.status) \(reply.errorStatus ?? "") \(reply.json?["error"]?["message"]?.stringValue ?? "")")
                    }
                    #expect(Set(answers).count == 1, "\(method) \(route) with \(headers.keys.sorted()): \(answers)")
                }
            }
        }
    }

    /// Unauthenticated writes of the register API are limited per address (an IPv6 client by its /64).
    @Test func checkinsAreLimitedPerAddress() async throws {
        // One check-in per 20 s, a burst of one: however slowly a loaded machine sends them, the second is refused.
        try await TestService.with(configure: { $0.checkinRatePerAddress = 0.05 }) { s in
            var statuses: [Int] = []
            for _ in 0..<3 {
                statuses.append(try await s.request("POST", "/checkin", headers: ["Content-Type": "application/json"], body: Array("{}".utf8)).status)
            }
            #expect(statuses == [200, 429, 429], "\(statuses)")
            let refused = try await s.request("POST", "/checkin", headers: ["Content-Type": "application/json"], body: Array("{}".utf8))
            #expect(refused.raw.header("retry-after") != nil && refused.text.hasPrefix("Error=RESOURCE_EXHAUSTED"))
        }
        #expect(ClientAddress.limiterKey("2001:db8:1:2:aaaa::1") == ClientAddress.limiterKey("2001:db8:1:2:bbbb::9"))
        #expect(ClientAddress.limiterKey("2001:db8:1:2::1") != ClientAddress.limiterKey("2001:db8:1:3::1"))
        #expect(ClientAddress.limiterKey("::ffff:192.0.2.7") == "192.0.2.7")
        #expect(ClientAddress.limiterKey("192.0.2.7") == "192.0.2.7")
    }

    /// The connection limit per address counts as the rate limits do: an IPv6 client by its /64 (it counted each
    /// address, so one subscriber's /64 could take every connection).
    @Test func theConnectionLimitCountsAnIPv6ClientByItsPrefix() throws {
        let http = try Configuration.fromEnvironment(["MAX_CONNECTIONS_PER_ADDRESS": "4", "INPUT_BUDGET_BYTES": "8388608"]).http
        #expect(http.maxConnectionsPerAddress == 4 && http.maxBufferedInputTotal == 8_388_608)
        #expect(http.connectionLimitKey("2001:db8:1:2:aaaa::1") == http.connectionLimitKey("2001:db8:1:2:bbbb::9"))
        #expect(http.connectionLimitKey("2001:db8:1:2::1") != http.connectionLimitKey("2001:db8:1:3::1"))
        #expect(http.connectionLimitKey("192.0.2.7") == "192.0.2.7")
    }
}
