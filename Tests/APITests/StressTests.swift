import Crypto
import Foundation
import JSON
import Postgres
import Synchronization
import Testing
import TokenRegistryTesting

/// For a fixed time, many concurrent consent flips, client registrations, refresh callbacks with random
/// `clientTime`s, subscriptions, creates and deletes on a handful of FIDs; then the invariants, read from the
/// database.
@Suite("Randomized stress with invariants", .enabled(if: TestDatabase.isAvailable))
struct StressTests {
    static let duration: Duration = .seconds(5)
    static let minimumRequests = 100
    static let workers = 8

    /// What the workers share: the callbacks that were accepted (the newest per FID), distinct client times to
    /// hand out, and counts.
    final class Shared: Sendable {
        let accepted = Mutex<[String: (time: Date, token: String)]>([:])
        let clientTimes = Mutex(Array(0..<100_000).shuffled())
        let requests = Atomic<Int>(0)
        let serverErrors = Atomic<Int>(0)

        func record(fid: String, time: Date, token: String) {
            accepted.withLock { s in
                if let newest = s[fid], newest.time >= time { return }
                s[fid] = (time, token)
            }
        }

        func nextClientTime() -> Int { clientTimes.withLock { $0.popLast() ?? 0 } }
    }

    @Test func invariantsHoldUnderConcurrentChanges() async throws {
        try await TestService.with { s in
            let linked = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/linkedServices", headers: s.serverHeaders,
                json: ["name": "crm", "endpoint": "https://crm.example/hook"])
            #expect(linked.status == 200)
            let consented = try await (0..<4).asyncMap { _ in try await s.createInstallation() }
            let callbacks = try await (0..<3).asyncMap { _ in try await s.createInstallation() }
            let churn = try await (0..<3).asyncMap { _ in try await s.createInstallation() }.map(\.fid)
            let shared = Shared()
            let base = "/v1/projects/\(s.project.id)"
            let deadline = ContinuousClock.now + Self.duration
            // On a machine loaded by the rest of the suite, the workers go on past the deadline until the run has
            // made at least `minimumRequests` (within a hard bound), so the invariants are checked on real churn.
            let hardDeadline = ContinuousClock.now + Self.duration * 6

            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<Self.workers {
                    group.addTask {
                        var rng = SystemRandomNumberGenerator()
                        while ContinuousClock.now < deadline
                            || (shared.requests.load(ordering: .relaxed) <= Self.minimumRequests
                                && ContinuousClock.now < hardDeadline)
                        {
                            let reply: Reply
                            switch (worker + Int.random(in: 0..<6, using: &rng)) % 6 {
                            case 0:
                                let i = consented.randomElement(using: &rng)!
                                reply = try await s.request(
                                    "PUT", "\(base)/installations/\(i.fid)/consent", headers: s.serverHeaders,
                                    json: ["autoInitEnabled": .bool(Bool.random(using: &rng))])
                            case 1:
                                let i = consented.randomElement(using: &rng)!
                                reply = try await s.request(
                                    "POST", "\(base)/registrations",
                                    headers: ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"],
                                    json: Bodies.webRegistration)
                            case 2:
                                let i = consented.randomElement(using: &rng)!
                                reply = try await s.request(
                                    "POST",
                                    "\(base)/registrations/\(i.fid)/topicSubscriptions/t\(Int.random(in: 0..<3, using: &rng)):subscribe",
                                    headers: ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"])
                            case 3, 4:
                                let i = callbacks.randomElement(using: &rng)!
                                let offset = shared.nextClientTime()
                                let time = Date(timeIntervalSince1970: 1_700_000_000 + Double(offset) / 1000)
                                let token = "\(i.fid):t\(offset)"
                                reply = try await s.request(
                                    "PUT", "\(base)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                                    json: [
                                        "token": .string(token), "platform": "android",
                                        "clientTime": .string(Timestamp.rfc3339(time)),
                                    ])
                                if reply.status == 200, reply.json?["outcome"]?.stringValue != "ignored_as_older" {
                                    shared.record(fid: i.fid, time: time, token: token)
                                }
                            default:
                                let fid = churn.randomElement(using: &rng)!
                                if Bool.random(using: &rng) {
                                    reply = try await s.request(
                                        "DELETE", "/v1/project/\(s.project.id)/instanceId/\(fid)",
                                        headers: s.serverHeaders)
                                } else {
                                    reply = try await s.request(
                                        "POST", "\(base)/installations", headers: ["x-goog-api-key": s.web.apiKey],
                                        json: [
                                            "fid": .string(fid), "authVersion": "FIS_v2", "appId": .string(s.web.id),
                                            "sdkVersion": "w:0.6.24",
                                        ])
                                }
                            }
                            shared.requests.add(1, ordering: .relaxed)
                            if reply.status >= 500 { shared.serverErrors.add(1, ordering: .relaxed) }
                        }
                    }
                }
                try await group.waitForAll()
            }
            print("stress: \(shared.requests.load(ordering: .relaxed)) requests in \(Self.duration)")
            #expect(shared.requests.load(ordering: .relaxed) > Self.minimumRequests)
            #expect(shared.serverErrors.load(ordering: .relaxed) == 0)

            // No active registration without messaging consent.
            #expect(
                try await count(
                    s,
                    """
                    SELECT count(*) AS n FROM registrations r LEFT JOIN consents c ON c.project_id = r.project_id
                        AND c.fid = r.fid AND c.purpose = 'messaging'
                    WHERE r.state = 'active' AND NOT coalesce(c.granted, false)
                    """) == 0)
            // No targeting answer includes an installation without consent.
            for topic in ["t0", "t1", "t2"] {
                let members =
                    try await s.request(
                        "GET", "\(base)/topics/\(topic)/registrations", headers: s.serverHeaders
                    ).json?["registrations"]?.arrayValue?.compactMap { $0["fid"]?.stringValue } ?? []
                for fid in members {
                    let consent = try await s.pool.query(
                        "SELECT granted FROM consents WHERE fid = \(fid) AND purpose = 'messaging'")
                    #expect(try consent.first?.require("granted", as: Bool.self) == true, "\(fid) in \(topic)")
                }
            }
            // No live installation whose FID is retired.
            let key = try #require(
                try await s.pool.query("SELECT secret FROM server_secrets WHERE name = 'fid-hmac'").first?.require(
                    "secret", as: ByteA.self
                ).bytes)
            let retired = Set(
                try await s.pool.query("SELECT encode(fid_hmac, 'hex') AS h FROM retired_fids").map {
                    try $0.require("h", as: String.self)
                })
            for row in try await s.pool.query("SELECT project_id, fid FROM installations") {
                let project: String = try row.require("project_id")
                let fid: String = try row.require("fid")
                let hash = Hex.encode(HMACSHA256.authenticate(Array((project + "\u{0}" + fid).utf8), key: key))
                #expect(!retired.contains(hash), "live installation \(fid) is retired")
            }
            // Every deletion is complete, or has a delivery for every linked service.
            #expect(
                try await count(
                    s,
                    """
                    SELECT count(*) AS n FROM deletions d WHERE d.completed_at IS NULL AND (
                        NOT EXISTS (SELECT 1 FROM deletion_deliveries dd WHERE dd.deletion_id = d.id)
                        OR EXISTS (SELECT 1 FROM linked_services ls WHERE ls.project_id = d.project_id AND NOT EXISTS (
                            SELECT 1 FROM deletion_deliveries dd WHERE dd.deletion_id = d.id AND dd.service = ls.name)))
                    """) == 0)
            #expect(try await count(s, "SELECT count(*) AS n FROM deletions") > 0)
            // Each callback installation holds the token of the newest clientTime that was accepted.
            for i in callbacks {
                guard let newest = shared.accepted.withLock({ $0[i.fid] }) else { continue }
                let row = try #require(
                    try await s.pool.query(
                        "SELECT token, client_time FROM registrations WHERE fid = \(i.fid)"
                    ).first)
                #expect(try row.require("token", as: String.self) == newest.token)
                #expect(try row.require("client_time", as: Date.self) == newest.time)
            }
        }
    }

    func count(_ s: TestService, _ sql: String) async throws -> Int {
        try await s.pool.query(PostgresQuery(unsafeSQL: sql)).first?.require("n") ?? -1
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async throws -> [T] {
        var out: [T] = []
        for element in self { out.append(try await transform(element)) }
        return out
    }
}
