import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// Every route of the table answers its success path in process, and refuses every credential its principal does not
/// accept. Both are checked against the route table itself: a route added without a success here, or whose
/// principal lets a stranger through, fails this suite.
@Suite("Every route, in process")
struct EveryRouteTests {
    @Test func everyRouteAnswersItsSuccessPath() async throws {
        try await World.with { w in
            try await Self.exerciseEveryRoute(w)
            let answered = w.s.exchanges.routes(answered: 200...299)
            let table = Set(w.s.app.routeTable.map { "\($0.method) \($0.template)" })
            #expect(
                table.subtracting(answered).subtracting(Self.notServed).sorted() == [], "routes with no in-process success")
            #expect(table.count >= 45)
        }
    }

    /// Every route through which a server credential can change state declares its audit entry, and each such call of
    /// the walk above appended exactly one (found by its request id), whatever it answered; the chain then verifies.
    @Test func everyStateChangingServerRouteWritesAnAuditEntry() async throws {
        try await World.with { w in
            try await Self.exerciseEveryRoute(w)
            let audit = w.s.app.services.audit
            try await audit.chain()
            var recorded: Set<String> = []
            var perRequest: [String: Int] = [:]
            for project in try await audit.projects() {
                for entry in try await audit.entries(projectID: project, afterSeq: 0, limit: 100_000) {
                    recorded.insert(entry.requestID)
                    perRequest[entry.requestID, default: 0] += 1
                    #expect(!entry.actor.isEmpty && !entry.actor.contains(w.s.serverKey))
                }
                let report = try await audit.verify(projectID: project)
                #expect(report.intact, "\(report.problems)")
            }
            // Reads that take a body: they change nothing.
            let reads: Set<String> = ["POST /v1/projects/{project}/targets:resolve"]
            let exchanges = w.s.exchanges.all
            for route in w.s.app.routeTable {
                let key = "\(route.method) \(route.template)"
                guard route.credentials.contains(.serverKey) || route.credentials.contains(.serverKeyOfAnyProject),
                    route.method != "GET" || route.audit != nil, !reads.contains(key)
                else { continue }
                #expect(route.audit != nil, "\(key) changes state with a server credential and declares no audit entry")
                let calls = exchanges.filter { $0.route == key && $0.bearer }
                #expect(!calls.isEmpty, "\(key) was not called with a server credential")
                for call in calls {
                    #expect(recorded.contains(call.requestID), "\(key) (\(call.status)) wrote no audit entry")
                    // One a call: a route whose write appends the entry (AuditCompanion) appends none of its own.
                    #expect(perRequest[call.requestID, default: 0] <= 1, "\(key) (\(call.status)) wrote two entries")
                }
            }
        }
    }

    /// One success of each route, in an order where each finds what it needs.
    /// FCM's send routes: answered 501 `UNIMPLEMENTED` whoever asks (a proxy that routed all of fcm.googleapis.com
    /// here must not see a 404, which an admin SDK reads as an unregistered token).
    static let notServed: Set<String> = ["POST /fcm/send", "POST /v1/projects/{project}/messages:send"]

    static func exerciseEveryRoute(_ w: World) async throws {
        let s = w.s
        let base = w.base
        for path in ["\(base)/messages:send", "/fcm/send"] {
            let refused = try await s.request("POST", path, headers: s.serverHeaders, json: ["message": ["token": "t"]])
            #expect(refused.status == 501 && refused.json?["error"]?["status"]?.stringValue == "UNIMPLEMENTED", "\(refused)")
        }
        // Ops.
        try await w.ok("GET", "/healthz")
        try await w.ok("GET", "/readyz")
        try await w.ok("GET", "/metrics", headers: ["Authorization": "Bearer in-process-metrics"])
        try await w.ok("GET", "/.well-known/jwks.json")
        try await w.ok("GET", "/openapi.yaml")
        // Firebase Installations.
        let i = try await s.createInstallation()
        try await w.ok(
            "POST", "\(base)/installations/\(i.fid)/authTokens:generate",
            headers: ["Authorization": "FIS_v2 \(i.refreshToken)", "x-goog-api-key": s.web.apiKey],
            json: ["installation": ["sdkVersion": "w:0.6.24"]])
        // Consent, by the installation and by the backend.
        try await w.ok("PUT", "\(base)/installations/\(i.fid)/consent", headers: w.fis(i), json: ["autoInitEnabled": true])
        try await w.ok("GET", "\(base)/installations/\(i.fid)/consent?view=history", headers: w.server)
        // Registrations.
        let registered = try await w.ok("POST", "\(base)/registrations", headers: w.fis(i), json: World.webBody)
        let token = try #require(registered.json?["token"]?.stringValue)
        try await w.ok("PATCH", "\(base)/registrations/\(token)", headers: w.fis(i), json: World.webBody)
        try await w.ok("GET", "\(base)/registrations/\(token):sendability", headers: w.server)
        try await w.ok(
            "PUT", "\(base)/installations/\(i.fid)/registration", headers: w.server,
            json: ["token": .string(token), "platform": "web"])
        // Topics, by the backend (FCM v1 shape) and by the client.
        let subscriptions = "\(base)/registrations/\(token)/topicSubscriptions"
        try await w.ok("POST", subscriptions, headers: w.server, json: ["topicName": "news"])
        try await w.ok("GET", subscriptions, headers: w.server)
        try await w.ok("GET", "\(subscriptions)/news", headers: w.server)
        try await w.ok("PATCH", "\(subscriptions)/sport?allowMissing=true", headers: w.server, json: [:])
        try await w.ok("DELETE", "\(subscriptions)/sport", headers: w.server)
        let own = "\(base)/registrations/\(i.fid)/topicSubscriptions"
        try await w.ok("POST", "\(own)/weather:subscribe", headers: w.fis(i), json: [:])
        try await w.ok("POST", "\(own)/weather:unsubscribe", headers: w.fis(i), json: [:])
        let members = try await w.ok("GET", "\(base)/topics/news/registrations", headers: w.server)
        #expect(members.text.contains(i.fid))
        try await w.ok("POST", "\(base)/targets:resolve", headers: w.server, json: ["condition": "'news' in topics"])
        // The Instance ID API.
        try await w.ok(
            "POST", "/iid/v1:batchAdd", headers: w.server,
            json: ["to": "/topics/offers", "registration_tokens": [.string(token)]])
        try await w.ok(
            "POST", "/iid/v1:batchRemove", headers: w.server,
            json: ["to": "/topics/offers", "registration_tokens": [.string(token)]])
        try await w.ok("POST", "/iid/v1/\(token)/rel/topics/offers", headers: w.server)
        try await w.ok("DELETE", "/iid/v1/\(token)/rel/topics/offers", headers: w.server)
        try await w.ok("GET", "/iid/info/\(token)?details=true", headers: w.server)
        try await w.ok(
            "POST", "/iid/v1:batchImport", headers: w.server,
            json: ["application": "com.example.app", "sandbox": true, "apns_tokens": ["ABCDEF0123"]])
        // The register API: a check-in, an iOS installation's token, a GCM-form token, a topic.
        let aid = try await w.checkIn()
        let ios = try await s.createInstallation(app: s.ios)
        let form: [(String, String)] = [
            ("app", "com.example.app"), ("sender", "123456789012"), ("X-subtype", "123456789012"), ("appid", ios.fid),
            ("apns_token", "p_" + String(repeating: "ab", count: 32)), ("gmp_app_id", s.ios.id),
        ]
        let iosToken = try await w.ok(
            "POST", "/register",
            headers: [
                "Authorization": aid, "x-goog-firebase-installations-auth": ios.authToken,
                "Content-Type": "application/x-www-form-urlencoded",
            ], body: World.form(form))
        let registeredIOS = String(iosToken.text.dropFirst(6).prefix { $0 != "\n" })
        try await w.ok(
            "POST", "/iid/register", headers: ["Authorization": aid, "Content-Type": "application/x-www-form-urlencoded"],
            body: World.form([("sender", registeredIOS), ("X-gcm.topic", "/topics/news")]))
        let gcmDevice = try await w.checkIn()
        try await w.ok(
            "POST", "/c2dm/register3",
            headers: ["Authorization": gcmDevice, "Content-Type": "application/x-www-form-urlencoded"],
            body: World.form([("app", "org.chromium.linux"), ("X-subtype", "wp:https://example.com/#1")]))
        // A service account's token.
        try await w.ok(
            "POST", "/token", headers: ["Content-Type": "application/x-www-form-urlencoded"],
            body: World.form([
                ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("assertion", try await w.assertion()),
            ]))
        // Linked services, deletions, an acknowledgement and the change feed.
        try await w.ok(
            "POST", "\(base)/linkedServices", headers: w.server,
            json: ["name": "mail", "endpoint": "https://mail.example/hook"])
        try await w.ok("GET", "\(base)/linkedServices", headers: w.server)
        try await w.ok("GET", "\(base)/linkedServices/mail", headers: w.server)
        try await w.ok("POST", "\(base)/linkedServices/mail:rotateSecret", headers: w.server)
        try await w.ok("DELETE", "\(base)/linkedServices/mail", headers: w.server)
        let rotation = Array("{}".utf8)
        let rotated = try await w.ok(
            "POST", "\(base)/linkedServices/crm:rotateSecret",
            headers: ["Registry-Signature": w.signature(rotation, for: .rotation(project: w.project, service: "crm"))],
            body: rotation)
        let secret = try #require(rotated.json?["secret"]?.stringValue)
        s.transport.answer("https://crm.example/hook", .status(202))
        let deleted = try await s.createInstallation()
        try await w.ok(
            "DELETE", "\(base)/installations/\(deleted.fid)",
            headers: ["Authorization": "FIS_v2 \(deleted.refreshToken)", "x-goog-api-key": s.web.apiKey])
        let byServer = try await s.createInstallation()
        try await w.ok("DELETE", "/v1/project/\(w.project)/instanceId/\(byServer.fid)", headers: w.server)
        _ = try await s.app.jobs.deliverDue()
        let notice = try #require(
            s.transport.sent.last {
                (try? JSONParser.parse($0.body))?["fid"]?.stringValue == deleted.fid
            })
        let deliveryID = try #require(try JSONParser.parse(notice.body)["deliveryId"]?.stringValue)
        let ack = JSONValue.object([("deliveryId", .string(deliveryID))]).encoded()
        try await w.ok(
            "POST", "\(base)/deletions/\(deleted.fid)/acks/crm",
            headers: [
                "Registry-Signature": w.signature(
                    ack,
                    for: .acknowledgement(project: w.project, fid: deleted.fid, service: "crm", deliveryID: deliveryID),
                    secret: secret),
                "Content-Type": "application/json",
            ], body: ack)
        let receipt = try await w.ok("GET", "\(base)/deletions/\(deleted.fid)", headers: w.server)
        #expect(receipt.json?["services"]?.arrayValue?.first?["state"]?.stringValue == "acknowledged")
        try await w.ok("GET", "\(base)/deletions?state=pending", headers: w.server)
        try await w.ok("GET", "\(base)/events?waitSeconds=0", headers: w.server)
        // Send feedback: a delivery, gorush's hook, the report, and (100 dead tokens trip the breaker) a clearance.
        try await w.ok(
            "POST", "\(base)/feedback", headers: w.server,
            json: ["results": [["token": .string(token), "webpush": ["status": 201]]]])
        let failures: [JSONValue] = try await s.registered(count: 100, prefix: "breaker").map {
            ["token": .string($0.token), "legacy": "NotRegistered"]
        }
        try await w.ok("POST", "\(base)/feedback", headers: w.server, json: ["results": .array(failures)])
        try await w.ok(
            "POST", "\(base)/feedback:gorush", headers: w.server,
            json: [
                "notif_id": "", "type": "failed-push", "platform": "ios", "token": .string(String(repeating: "ab", count: 32)),
                "message": "Hello", "error": "Unregistered",
            ])
        try await w.ok("GET", "\(base)/hygiene", headers: w.server)
        try await w.ok("POST", "\(base)/hygiene/breakers/fcm:clear", headers: w.server, json: [:])
        // People: a binding, the installation reading its own, a user, a person as a target, both exports, a logout, the
        // person's erasure and its receipt, and the audit log.
        let person = try await s.createInstallation()
        try await w.ok("PUT", "\(base)/installations/\(person.fid)/user", headers: w.server, json: ["userId": "user-42"])
        try await w.ok("GET", "\(base)/installations/\(person.fid)/user", headers: w.fis(person))
        try await w.ok("GET", "\(base)/users/user-42", headers: w.server)
        try await w.ok("POST", "\(base)/targets:resolve", headers: w.server, json: ["users": ["user-42"]])
        try await w.ok("GET", "\(base)/users/user-42:export", headers: w.server)
        try await w.ok("GET", "\(base)/installations/\(person.fid):export", headers: w.server)
        try await w.ok("DELETE", "\(base)/installations/\(person.fid)/user", headers: w.server)
        try await w.ok("PUT", "\(base)/installations/\(person.fid)/user", headers: w.server, json: ["userId": "user-42"])
        let erased = try await w.ok("POST", "\(base)/users/user-42:erase", headers: w.server)
        let erasure = try #require(erased.json?["erasureId"]?.stringValue)
        try await w.ok("GET", "\(base)/erasures/\(erasure)", headers: w.server)
        // The routes an installation and a backend share, with the backend's credential.
        let shared = try await s.createInstallation()
        try await w.ok(
            "PUT", "\(base)/installations/\(shared.fid)/consent", headers: w.server, json: ["autoInitEnabled": true])
        try await w.ok(
            "PUT", "\(base)/installations/\(shared.fid)/registration", headers: w.server,
            json: ["token": .string(shared.fid + ":shared-token"), "platform": "android"])
        try await w.ok("DELETE", "\(base)/registrations/\(shared.fid):shared-token", headers: w.server)
        try await w.ok("DELETE", "\(base)/installations/\(shared.fid)", headers: w.server)
        try await w.ok("GET", "\(base)/auditLog", headers: w.server)
        let exported = try await w.ok("GET", "\(base):export", headers: w.server)
        #expect(exported.text.hasPrefix("{\"format\":\"tokenregistry.export/1\""))
        #expect(exported.text.split(separator: "\n").count > 3)
        // Last, what removes: the registration, by its installation.
        try await w.ok("DELETE", "\(base)/registrations/\(token)", headers: w.fis(i))
    }
}
