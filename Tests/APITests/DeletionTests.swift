import Crypto
import Foundation
import HTTP
import JSON
import Postgres
import Registry
import Synchronization
import Testing
import TokenRegistryTesting

@testable import API

/// A real HTTP receiver standing in for a linked service: answers the statuses it is given in turn (then 200),
/// records every notice and checks its signature.
final class Receiver: Sendable {
    struct Notice: Sendable {
        let body: JSONValue
        let signatureValid: Bool
    }

    final class State: Sendable {
        let script: Mutex<[Int]>
        let notices = Mutex<[Notice]>([])
        let secret = Mutex<String>("")
        init(_ statuses: [Int]) { script = Mutex(statuses) }
    }

    let state: State
    let server: HTTPServer
    let port: Int

    init(statuses: [Int]) throws {
        let state = State(statuses)
        self.state = state
        server = HTTPServer(configuration: .init(host: "127.0.0.1", port: 0, eventLoops: 1)) { request in
            let header = request.headers["registry-signature"] ?? ""
            let key = state.secret.withLock { $0 }
            let valid = WebhookSignature.verify(
                header: header, secrets: [key], body: request.body, now: Int64(Date().timeIntervalSince1970))
            let notice = Notice(body: (try? JSONParser.parse(request.body)) ?? .null, signatureValid: valid)
            state.notices.withLock { $0.append(notice) }
            let status = state.script.withLock { s -> Int in s.isEmpty ? 200 : s.removeFirst() }
            return HTTPResponse(status: status, contentType: "application/json", body: "{}")
        }
        port = try server.start()
    }

    var notices: [Notice] { state.notices.withLock { $0 } }
    func setSecret(_ secret: String) { state.secret.withLock { $0 = secret } }
    var endpoint: String { "http://127.0.0.1:\(port)/hooks/deletions" }
}

@Suite("Deletion, purge, expiry, change feed", .enabled(if: TestDatabase.isAvailable))
struct DeletionTests {
    func link(_ s: TestService, _ receiver: Receiver, name: String = "crm") async throws {
        let created = try await s.request(
            "POST", "/v1/projects/\(s.project.id)/linkedServices", headers: s.serverHeaders,
            json: ["name": .string(name), "endpoint": .string(receiver.endpoint)])
        #expect(created.status == 200, "\(created)")
        receiver.setSecret(created.json?["secret"]?.stringValue ?? "")
    }

    @Test func aDeletionReachesAServiceThatFailsFiveTimes() async throws {
        let clock = ManualClock(Date())
        let receiver = try Receiver(statuses: [503, 503, 503, 503, 503])
        try await TestService.with(clock: clock) { s in
            try await link(s, receiver)
            let i = try await s.createInstallation()
            #expect(
                try await s.request(
                    "DELETE", "/v1/projects/\(s.project.id)/installations/\(i.fid)",
                    headers: ["Authorization": "FIS_v2 \(i.refreshToken)"]
                ).status == 200)
            let receipt = "/v1/projects/\(s.project.id)/deletions/\(i.fid)"
            let pending = try #require(try await s.request("GET", receipt, headers: s.serverHeaders).json)
            #expect(pending["state"]?.stringValue == "pending")
            #expect(pending["reason"]?.stringValue == "client")
            for _ in 0..<8 {
                _ = try await s.app.jobs.deliverDue()
                clock.advance(by: 3600)
            }
            let notices = receiver.notices
            #expect(notices.count == 6)
            #expect(notices.allSatisfy { $0.signatureValid })
            #expect(
                Set(notices.compactMap { $0.body["deliveryId"]?.stringValue }).count == 1,
                "the deliveryId stays the same on every retry")
            #expect(notices.last?.body["fid"]?.stringValue == i.fid)
            #expect(notices.last?.body["type"]?.stringValue == "installation.deleted")
            let done = try #require(try await s.request("GET", receipt, headers: s.serverHeaders).json)
            #expect(done["state"]?.stringValue == "done", "\(done.text)")
            #expect(done["services"]?.arrayValue?.first?["attempts"] == .int(6))
            #expect(done["services"]?.arrayValue?.first?["state"]?.stringValue == "acknowledged")
            let metrics = try await s.request("GET", "/metrics").text
            #expect(metrics.contains("registry_delivery_failures_total{project=\"demo-proj\",service=\"crm\"} 5"))
            #expect(metrics.contains("registry_deletions{state=\"done\"} 1"))
        }
        await receiver.server.shutdown(drainTimeout: 1)
    }

    /// A linked service removed while an installation's deletion is being written: the removal is under way (another
    /// session has deleted the service's row and not committed), so the deletion waits for it, and then owes the
    /// gone service nothing: its receipt is done at once, with no delivery left pending for ever. (Without the
    /// deletion's key-share lock, it does not wait, writes a delivery to the service the removal is taking away, and the
    /// removal's abandon, which cannot see it, leaves it pending.)
    @Test func aServiceRemovedWhileADeletionIsWrittenIsOwedNothing() async throws {
        let receiver = try Receiver(statuses: [])
        try await TestService.with { s in
            try await link(s, receiver)
            let i = try await s.createInstallation()
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query(
                "DELETE FROM linked_services WHERE project_id = \(s.project.id) AND name = 'crm' RETURNING name")
            let deletion = Task {
                try await s.request(
                    "DELETE", "/v1/projects/\(s.project.id)/installations/\(i.fid)",
                    headers: ["Authorization": "FIS_v2 \(i.refreshToken)"]
                ).status
            }
            try await session.waitUntilBlocked(1)
            try await session.execute("COMMIT")
            #expect(try await deletion.value == 200)
            let receipt = try #require(
                try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/deletions/\(i.fid)", headers: s.serverHeaders
                ).json)
            #expect(receipt["state"]?.stringValue == "done", "\(receipt.text)")
            #expect(receipt["services"]?.arrayValue?.isEmpty ?? true, "\(receipt.text)")
        }
        await receiver.server.shutdown(drainTimeout: 1)
    }

    /// Two services acknowledge one deletion at the same moment: another session holds the deletions table in share
    /// mode, so both outcomes are written and wait at the completion; once it lets go the deletion is done. (Without
    /// the deletion's lock each checked for open deliveries in a snapshot where the other's was still open, neither
    /// completed it, and the receipt said pending, then overdue, for ever.)
    @Test func twoAcknowledgementsAtOnceCompleteTheDeletion() async throws {
        let receiver = try Receiver(statuses: [])
        try await TestService.with { s in
            try await link(s, receiver)
            try await link(s, receiver, name: "mail")
            let i = try await s.createInstallation()
            #expect(
                try await s.request(
                    "DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)", headers: s.serverHeaders
                ).status == 200)
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN; LOCK TABLE deletions IN SHARE MODE")
            let delivered = Task { try await s.app.jobs.deliverDue() }
            try await session.waitUntilBlocked(2)
            try await session.execute("COMMIT")
            _ = try await delivered.value
            #expect(receiver.notices.count == 2)
            let receipt = try #require(
                try await s.request("GET", "/v1/projects/\(s.project.id)/deletions/\(i.fid)", headers: s.serverHeaders).json)
            #expect(receipt["state"]?.stringValue == "done", "\(receipt.text)")
        }
        await receiver.server.shutdown(drainTimeout: 1)
    }

    @Test func acceptedNoticesWaitForTheAsynchronousAck() async throws {
        let receiver = try Receiver(statuses: [202])
        try await TestService.with { s in
            try await link(s, receiver)
            let i = try await s.createInstallation()
            _ = try await s.request(
                "DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)", headers: s.serverHeaders)
            _ = try await s.app.jobs.deliverDue()
            let receipt = "/v1/projects/\(s.project.id)/deletions/\(i.fid)"
            #expect(
                try await s.request("GET", receipt, headers: s.serverHeaders).json?["services"]?.arrayValue?.first?[
                    "state"]?.stringValue == "accepted")
            // The server key alone cannot acknowledge for a service: only the service's own signature can.
            let ack = "/v1/projects/\(s.project.id)/deletions/\(i.fid)/acks/crm"
            #expect(try await s.request("POST", ack, headers: s.serverHeaders).status == 401)
            let deliveryID = try #require(receiver.notices.last?.body["deliveryId"]?.stringValue)
            let handed = receiver.state.secret.withLock { $0 }
            func send(_ r: LinkedServiceRequest, path: String? = nil) async throws -> Int {
                try await s.request("POST", path ?? r.path, headers: r.headers, body: r.body).status
            }
            func acknowledgement(secret: String, time: Int64 = Int64(Date().timeIntervalSince1970)) -> LinkedServiceRequest
            {
                .acknowledgement(
                    project: s.project.id, fid: i.fid, service: "crm", deliveryID: deliveryID, secret: secret, time: time)
            }
            // The secret the server-key call handed out signs notices, not acknowledgements (403), until the service
            // replaces it with its own through a rotation it signs.
            #expect(try await send(acknowledgement(secret: handed)) == 403)
            let rotation = LinkedServiceRequest.rotation(project: s.project.id, service: "crm", secret: handed)
            let rotated = try await s.request("POST", rotation.path, headers: rotation.headers, body: rotation.body)
            #expect(rotated.status == 200, "\(rotated)")
            let own = try #require(rotated.json?["secret"]?.stringValue)
            let now = Int64(Date().timeIntervalSince1970)
            #expect(try await send(acknowledgement(secret: own, time: now - 301)) == 401)
            #expect(try await send(acknowledgement(secret: "not-the-secret")) == 401)
            #expect(try await send(acknowledgement(secret: own), path: ack.replacingOccurrences(of: "crm", with: "nope")) == 401)
            #expect(try await send(acknowledgement(secret: own)) == 200)
            #expect(try await s.request("GET", receipt, headers: s.serverHeaders).json?["state"]?.stringValue == "done")
            // A retried acknowledgement is answered the same.
            #expect(try await send(acknowledgement(secret: own)) == 200)
        }
        await receiver.server.shutdown(drainTimeout: 1)
    }

    /// After the deadline nothing holds the FID: every text column of every table is scanned for it.
    @Test func atTheDeadlineNothingOfTheFIDRemains() async throws {
        let clock = ManualClock(Date())
        let receiver = try Receiver(statuses: Array(repeating: 500, count: 1000))
        try await TestService.with(clock: clock) { s in
            try await link(s, receiver)
            let i = try await s.createInstallation()
            let auth = ["x-goog-firebase-installations-auth": i.authToken]
            _ = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent", headers: auth,
                json: ["autoInitEnabled": true])
            _ = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                json: ["token": .string(i.fid + ":tok"), "platform": "android"])
            _ = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/registrations/\(i.fid)/topicSubscriptions?topicName=news",
                headers: s.serverHeaders, json: [:])
            // A token for another sender (iOS retrieveFCMToken(forSenderID:)) is held too.
            let installation = try #require(try await s.app.installations.find(project: s.project, fid: i.fid))
            _ = try await s.app.registrations.senderToken(installation: installation, sender: "987", scope: "*")
            _ = try await s.app.jobs.relayEvents()
            #expect(
                try await s.request(
                    "DELETE", "/v1/projects/\(s.project.id)/installations/\(i.fid)", headers: s.serverHeaders
                ).status == 200)
            _ = try await s.app.jobs.runAll()
            clock.advance(by: 181 * 86_400)
            _ = try await s.app.jobs.runAll()
            let holders = try await PeopleAPITests.holders(of: i.fid, in: s)
            #expect(holders == [], "the FID survives in \(holders)")
            // The service that never acknowledged is counted as overdue and reported by id and keyed hash only.
            let overdue = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/deletions?state=overdue", headers: s.serverHeaders)
            let entry = try #require(overdue.json?["deletions"]?.arrayValue?.first)
            #expect(entry["fid"] == .null)
            #expect(entry["fidHash"]?.stringValue?.count == 64)
            #expect(entry["services"]?.arrayValue?.first?["name"]?.stringValue == "crm")
            #expect(!overdue.text.contains(i.fid))
            #expect(try await s.request("GET", "/metrics").text.contains("registry_deletions{state=\"overdue\"} 1"))
            // The receipt can still be asked for by FID: the hash finds it, without storing the FID.
            #expect(
                try await s.request("GET", "/v1/projects/\(s.project.id)/deletions/\(i.fid)", headers: s.serverHeaders)
                    .json?["state"]?.stringValue == "overdue")
            // And the FID is still never handed out again.
            #expect(try await s.createInstallation(fid: i.fid).fid != i.fid)
        }
        await receiver.server.shutdown(drainTimeout: 1)
    }

    @Test func idleInstallationsExpireAfter270Days() async throws {
        let clock = ManualClock(Date())
        try await TestService.with(clock: clock) { s in
            let idle = try await s.createInstallation()
            clock.advance(by: 200 * 86_400)
            let active = try await s.createInstallation()
            clock.advance(by: 71 * 86_400)
            #expect(try await s.app.jobs.expireIdle() == 1)
            #expect(try await s.app.installations.find(project: s.project, fid: idle.fid) == nil)
            #expect(try await s.app.installations.find(project: s.project, fid: active.fid) != nil)
            #expect(
                try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/deletions/\(idle.fid)", headers: s.serverHeaders
                )
                .json?["reason"]?.stringValue == "inactivity")
        }
    }

    @Test func threeReplicasDeliverEachNoticeOnce() async throws {
        let receiver = try Receiver(statuses: [])
        try await TestService.with { s in
            try await link(s, receiver)
            for _ in 0..<30 {
                let i = try await s.createInstallation()
                _ = try await s.request(
                    "DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)", headers: s.serverHeaders)
            }
            var replicas: [Application] = []
            for _ in 0..<3 {
                replicas.append(
                    try await s.replica())
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for replica in replicas {
                    group.addTask { for _ in 0..<5 { _ = try await replica.jobs.deliverDue(batch: 4) } }
                }
                try await group.waitForAll()
            }
            let ids = receiver.notices.compactMap { $0.body["deliveryId"]?.stringValue }
            #expect(ids.count == 30)
            #expect(Set(ids).count == 30)
            let done = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/deletions?state=done&pageSize=1000", headers: s.serverHeaders)
            #expect(done.json?["deletions"]?.arrayValue?.count == 30)
        }
        await receiver.server.shutdown(drainTimeout: 1)
    }

    @Test func theChangeFeedCarriesALifecycleInOrder() async throws {
        try await TestService.with { s in
            let i = try await s.createInstallation()
            let auth = ["x-goog-firebase-installations-auth": i.authToken]
            _ = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                json: ["token": "life-1", "platform": "android"])
            _ = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent", headers: auth,
                json: ["autoInitEnabled": false])
            _ = try await s.request(
                "DELETE", "/v1/projects/\(s.project.id)/installations/\(i.fid)", headers: s.serverHeaders)
            // A long poll started before the relay runs waits, then returns what the relay moved. The relay moves only
            // events of transactions older than every running one (cluster-wide), so it may take a few rounds while the
            // rest of the suite writes; a client then reads on from the cursor it got.
            let poll = Task {
                try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/events?waitSeconds=10", headers: s.serverHeaders)
            }
            try await Task.sleep(for: .milliseconds(300))
            var moved = 0
            for _ in 0..<100 where moved < 5 {
                moved += try await s.app.jobs.relayEvents()
                if moved < 5 { try await Task.sleep(for: .milliseconds(50)) }
            }
            var reply = try await poll.value
            var events = try #require(reply.json?["events"]?.arrayValue)
            while events.count < 5, let cursor = reply.json?["nextCursor"]?.stringValue {
                reply = try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/events?after=\(cursor)&waitSeconds=2", headers: s.serverHeaders
                )
                let more = reply.json?["events"]?.arrayValue ?? []
                if more.isEmpty { break }
                events += more
            }
            #expect(
                events.map { $0["type"]?.stringValue } == [
                    "installation.created", "registration.created", "consent.changed",
                    "registration.disabled", "installation.deleted",
                ])
            let cursors = events.compactMap { $0["cursor"]?.stringValue.flatMap { Int64($0) } }
            #expect(cursors == cursors.sorted())
            let next = try #require(reply.json?["nextCursor"]?.stringValue)
            let empty = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/events?after=\(next)&waitSeconds=0", headers: s.serverHeaders)
            #expect(empty.json?["events"]?.arrayValue?.isEmpty == true)
            #expect(
                try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/events?waitSeconds=31", headers: s.serverHeaders
                ).status == 400)
            #expect(try await s.request("GET", "/v1/projects/\(s.project.id)/events").status == 401)
        }
    }

    @Test func linkedServiceValidation() async throws {
        try await TestService.with { s in
            let path = "/v1/projects/\(s.project.id)/linkedServices"
            for body: JSONValue in [
                ["name": "Bad Name", "endpoint": "http://x"], ["name": "ok", "endpoint": "ftp://x"], ["name": "ok"],
                ["name": "ok", "endpoint": "not a url"],
            ] {
                #expect(
                    try await s.request("POST", path, headers: s.serverHeaders, json: body).status == 400,
                    "\(body.text)")
            }
            #expect(
                try await s.request(
                    "POST", path, headers: s.serverHeaders, json: ["name": "a", "endpoint": "https://example.test/x"]
                ).status == 200)
            #expect(
                try await s.request(
                    "POST", path, headers: s.serverHeaders, json: ["name": "a", "endpoint": "https://example.test/x"]
                ).status == 409)
            let listed = try await s.request("GET", path, headers: s.serverHeaders)
            #expect(listed.json?["linkedServices"]?.arrayValue?.first?["secret"] == nil)
            #expect(try await s.request("GET", path + "/a", headers: s.serverHeaders).status == 200)
            #expect(try await s.request("DELETE", path + "/a", headers: s.serverHeaders).status == 200)
            #expect(try await s.request("DELETE", path + "/a", headers: s.serverHeaders).status == 404)
        }
    }
}
