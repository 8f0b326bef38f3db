import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// Topics through both generations of the admin API, the client verbs, and targeting.
@Suite("Topics and targeting")
struct TopicsTests {
    /// Creates `count` installations with registrations through the refresh callback; returns (fid, token) pairs.
    @Test func fcmV1TopicSubscriptions() async throws {
        try await InProcessService.with { s in
            let (fid, token) = try await s.registered(count: 1)[0]
            let base =
                "/v1/projects/\(s.project.id)/registrations/\(token.replacingOccurrences(of: ":", with: "%3A"))/topicSubscriptions"
            let created = try await s.request("POST", base + "?topic_name=news", headers: s.serverHeaders, json: [:])
            #expect(created.status == 200, "\(created)")
            #expect(created.json?["topic_name"]?.stringValue == "news")
            #expect(created.json?["createTime"]?.stringValue?.hasSuffix("Z") == true)
            #expect(
                try await s.request("POST", base + "?topicName=news", headers: s.serverHeaders, json: [:]).status == 409
            )
            #expect(
                try await s.request(
                    "POST",
                    "/v1/projects/\(s.project.id)/registrations/\(fid)/topicSubscriptions?topicName=%2Ftopics%2Fweather",
                    headers: s.serverHeaders, json: [:]
                ).status == 200)
            #expect(
                try await s.request("GET", base + "/news", headers: s.serverHeaders).json?["topicName"]?.stringValue
                    == "news")
            #expect(try await s.request("GET", base + "/nope", headers: s.serverHeaders).status == 404)
            #expect(try await s.request("PATCH", base + "/fresh", headers: s.serverHeaders, json: [:]).status == 404)
            #expect(
                try await s.request("PATCH", base + "/fresh?allowMissing=true", headers: s.serverHeaders, json: [:])
                    .status == 200)
            let list = try await s.request("GET", base + "?pageSize=2", headers: s.serverHeaders)
            #expect(
                list.json?["topicSubscriptions"]?.arrayValue?.map { $0["topicName"]?.stringValue } == ["fresh", "news"])
            let next = try #require(list.json?["nextPageToken"]?.stringValue)
            let rest = try await s.request("GET", base + "?pageSize=2&pageToken=\(next)", headers: s.serverHeaders)
            #expect(rest.json?["topicSubscriptions"]?.arrayValue?.map { $0["topicName"]?.stringValue } == ["weather"])
            #expect(rest.json?["nextPageToken"] == nil)
            #expect(try await s.request("GET", base + "?pageToken=garbage", headers: s.serverHeaders).status == 400)
            #expect(try await s.request("DELETE", base + "/news", headers: s.serverHeaders).status == 200)
            #expect(try await s.request("DELETE", base + "/news", headers: s.serverHeaders).status == 404)
            #expect(
                try await s.request("DELETE", base + "/news?allow_missing=true", headers: s.serverHeaders).status == 200
            )
            #expect(
                try await s.request("POST", base + "?topicName=bad%20topic", headers: s.serverHeaders, json: [:]).status
                    == 400)
            #expect(
                try await s.request(
                    "POST", base + "?topicName=\(String(repeating: "x", count: 901))", headers: s.serverHeaders,
                    json: [:]
                ).status == 400)
            let unknown = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/registrations/unknown-token/topicSubscriptions?topicName=a",
                headers: s.serverHeaders, json: [:])
            #expect(unknown.status == 404)
            #expect(unknown.errorStatus == "NOT_FOUND")
        }
    }

    /// A registration the service does not know, on every v1 topic route: 404 with FCM's `UNREGISTERED` detail, which
    /// firebase-admin reads before the status (so its error's code is UNREGISTERED, as a send's is).
    @Test func anUnknownRegistrationIsUnregistered() async throws {
        try await InProcessService.with { s in
            let base = "/v1/projects/\(s.project.id)/registrations/nobody%3Aknows/topicSubscriptions"
            for (method, path) in [
                ("POST", base + "?topicName=news"), ("GET", base + "/news"), ("DELETE", base + "/news"),
                ("DELETE", base + "/news?allow_missing=true"),
            ] {
                let r = try await s.request(method, path, headers: s.serverHeaders, json: [:])
                #expect(r.status == 404, "\(method) \(path): \(r)")
                let detail = r.json?["error"]?["details"]?.arrayValue?.first
                #expect(detail?["errorCode"]?.stringValue == "UNREGISTERED", "\(method) \(path): \(r)")
                #expect(detail?["@type"]?.stringValue == "type.googleapis.com/google.firebase.fcm.v1.FcmError")
            }
        }
    }

    @Test func clientVerbsUseTheInstallationToken() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation()
            let path = "/v1/projects/\(s.project.id)/registrations/\(i.fid)/topicSubscriptions/promo"
            let auth = ["x-goog-firebase-installations-auth": i.authToken, "x-goog-api-key": s.web.apiKey]
            #expect(try await s.request("POST", path + ":subscribe", headers: auth).status == 200)
            #expect(try await s.request("POST", path + ":subscribe", headers: auth).status == 200)
            #expect(
                try await s.app.topics.subscription(project: s.project, fid: i.fid, topic: "promo") != nil
            )
            #expect(try await s.request("POST", path + ":unsubscribe", headers: auth).status == 200)
            #expect(
                try await s.app.topics.subscription(project: s.project, fid: i.fid, topic: "promo") == nil
            )
            let other = try await s.createInstallation()
            #expect(
                try await s.request(
                    "POST", path + ":subscribe", headers: ["x-goog-firebase-installations-auth": other.authToken]
                ).status == 403)
        }
    }

    /// Android puts the topic into the path as it is (`TopicSubscriptionClient.java`); iOS and Python percent-encode
    /// it. Topic names may hold `%`, so both forms must name the same topic. Generated: names over the whole topic
    /// alphabet, `%` often, in every position, each sent both ways. (A `%` followed by two hex digits is an escape
    /// whichever client wrote it, by RFC 3986; those names are sent encoded only.)
    @Test func topicsMeanTheSameEncodedOrNot() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation()
            let auth = ["x-goog-firebase-installations-auth": i.authToken, "x-goog-api-key": s.web.apiKey]
            let alphabet = Array("abcXYZ019-_.~%%%%")
            var generator = SystemRandomNumberGenerator()
            var names = ["%", "100%", "%done", "a%b", "a%%b", "%g0", "%4", "private/50%off"]
            for _ in 0..<60 {
                names.append(String((0..<Int.random(in: 1...12, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }))
            }
            var unreserved = CharacterSet.alphanumerics
            unreserved.insert(charactersIn: "-._~")
            func escapes(_ name: String) -> Bool {
                let bytes = Array(name.utf8)
                return bytes.indices.contains { at in
                    bytes[at] == UInt8(ascii: "%") && at + 2 < bytes.count
                        && bytes[(at + 1)...(at + 2)].allSatisfy { (0x30...0x39).contains($0) || (0x41...0x46).contains($0) || (0x61...0x66).contains($0) }
                }
            }
            func path(_ segment: String) -> String {
                "/v1/projects/\(s.project.id)/registrations/\(i.fid)/topicSubscriptions/\(segment)"
            }
            for name in names {
                let encoded = name.addingPercentEncoding(withAllowedCharacters: unreserved)!
                var forms = [encoded]
                if !escapes(name) { forms.append(name.replacingOccurrences(of: "/", with: "%2F")) }
                for form in forms {
                    let subscribed = try await s.request("POST", path(form) + ":subscribe", headers: auth)
                    #expect(subscribed.status == 200, "\(name) as \(form): \(subscribed)")
                    #expect(
                        try await s.app.topics.subscription(project: s.project, fid: i.fid, topic: name) != nil,
                        "\(name) as \(form)")
                    #expect(try await s.request("POST", path(form) + ":unsubscribe", headers: auth).status == 200)
                    #expect(try await s.app.topics.subscription(project: s.project, fid: i.fid, topic: name) == nil)
                }
            }
        }
    }

    @Test func iidBatchesAnswerInInputOrder() async throws {
        try await InProcessService.with { s in
            let regs = try await s.registered(count: 3)
            let tokens: [JSONValue] = [
                .string(regs[0].token), "unknown-token", .string(regs[1].token), "", "bad token",
                .string(regs[2].token),
            ]
            let add = try await s.request(
                "POST", "/iid/v1:batchAdd", headers: s.serverHeaders.merging(["access_token_auth": "true"]) { $1 },
                json: ["to": "/topics/news", "registration_tokens": .array(tokens)])
            #expect(add.status == 200, "\(add)")
            #expect(
                add.json?["results"] == [
                    [:], ["error": "NOT_FOUND"], [:], ["error": "INVALID_ARGUMENT"], ["error": "INVALID_ARGUMENT"], [:],
                ])
            let info = try await s.request("GET", "/iid/info/\(regs[0].token)?details=true", headers: s.serverHeaders)
            #expect(info.json?["rel"]?["topics"]?["news"]?["addDate"]?.stringValue?.count == 10)
            #expect(info.json?["authorizedEntity"]?.stringValue == String(s.project.number))
            #expect(
                try await s.request("GET", "/iid/info/nope", headers: s.serverHeaders).json?["error"]?.stringValue
                    == "InvalidToken")
            let remove = try await s.request(
                "POST", "/iid/v1:batchRemove", headers: s.serverHeaders,
                json: ["to": "news", "registration_tokens": [.string(regs[0].token), "unknown-token"]])
            #expect(remove.json?["results"] == [[:], ["error": "NOT_FOUND"]])
            #expect(
                try await s.request("POST", "/iid/v1/\(regs[0].token)/rel/topics/solo", headers: s.serverHeaders).json
                    == [:])
            #expect(
                try await s.request("DELETE", "/iid/v1/\(regs[0].token)/rel/topics/solo", headers: s.serverHeaders).json
                    == [:])
            #expect(
                try await s.request("POST", "/iid/v1/unknown/rel/topics/solo", headers: s.serverHeaders).status == 404)
            let unauthenticated = try await s.request(
                "POST", "/iid/v1:batchAdd", json: ["to": "x", "registration_tokens": ["a"]])
            // Google's HTML page, as the Node admin SDK expects of a wrong server key (not JSON).
            #expect(unauthenticated.status == 401)
            #expect(unauthenticated.header("content-type")?.hasPrefix("text/html") == true)
            #expect(unauthenticated.text.contains("<H1>Unauthorized</H1>"))
            let notStrings = try await s.request(
                "POST", "/iid/v1:batchAdd", headers: s.serverHeaders, json: ["to": "x", "registration_tokens": [42]])
            #expect(notStrings.status == 400)
            let tooMany = try await s.request(
                "POST", "/iid/v1:batchAdd", headers: s.serverHeaders,
                json: ["to": "x", "registration_tokens": .array((0...1000).map { .string("t\($0)") })])
            #expect(tooMany.status == 400)
            #expect(tooMany.json?["error"]?.stringValue == "INVALID_ARGUMENT")
        }
    }

    @Test func thousandTokenBatch() async throws {
        try await InProcessService.with { s in
            let regs = try await s.registered(count: 5)
            let tokens: [JSONValue] = (0..<1000).map { n in
                n % 200 == 0 ? .string(regs[n / 200].token) : .string("missing-\(n)")
            }
            let add = try await s.request(
                "POST", "/iid/v1:batchAdd", headers: s.serverHeaders,
                json: ["to": "/topics/big", "registration_tokens": .array(tokens)])
            let results = try #require(add.json?["results"]?.arrayValue)
            #expect(results.count == 1000)
            #expect(results.enumerated().allSatisfy { n, r in (n % 200 == 0) == (r == [:]) })
        }
    }

    @Test func conditionsResolveToLiveConsentedRegistrations() async throws {
        try await InProcessService.with { s in
            let regs = try await s.registered(count: 4)
            let subscribe = { (index: Int, topic: String) in
                _ = try await s.request(
                    "POST",
                    "/v1/projects/\(s.project.id)/registrations/\(regs[index].fid)/topicSubscriptions?topicName=\(topic)",
                    headers: s.serverHeaders, json: [:])
            }
            try await subscribe(0, "a"); try await subscribe(0, "b")
            try await subscribe(1, "a"); try await subscribe(1, "c")
            try await subscribe(2, "a")
            try await subscribe(3, "b")
            let resolve = { (condition: String) -> Set<String> in
                let r = try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/targets:resolve", headers: s.serverHeaders,
                    json: ["condition": .string(condition)])
                return Set(r.json?["registrations"]?.arrayValue?.compactMap { $0["fid"]?.stringValue } ?? [])
            }
            #expect(
                try await resolve("'a' in topics && ('b' in topics || !('c' in topics))") == [regs[0].fid, regs[2].fid])
            #expect(try await resolve("'b' in topics") == [regs[0].fid, regs[3].fid])
            #expect(try await resolve("!('a' in topics)") == [regs[3].fid])
            // Withdrawn consent removes an installation from every answer.
            _ = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(regs[0].fid)/consent", headers: s.serverHeaders,
                json: ["autoInitEnabled": false])
            #expect(try await resolve("'b' in topics") == [regs[3].fid])
            // Paging walks every member once.
            var seen: [String] = []
            var token: String?
            repeat {
                var body: [(String, JSONValue)] = [("condition", "'a' in topics || 'b' in topics"), ("pageSize", 1)]
                if let token { body.append(("pageToken", .string(token))) }
                let page = try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/targets:resolve", headers: s.serverHeaders,
                    json: .object(body))
                seen += page.json?["registrations"]?.arrayValue?.compactMap { $0["fid"]?.stringValue } ?? []
                token = page.json?["nextPageToken"]?.stringValue
            } while token != nil
            #expect(Set(seen) == [regs[1].fid, regs[2].fid, regs[3].fid])
            #expect(seen.count == 3)
        }
    }

    static let badConditions: [(String, String)] = [
        ("'a' in topics &&", "position"), ("'a' in topic", "topics"), ("('a' in topics", "')'"),
        ("'a in topics", "unterminated"),
        (
            "'a' in topics && 'b' in topics && 'c' in topics && 'd' in topics && 'e' in topics && 'f' in topics",
            "at most 5"
        ),
        ("'bad topic' in topics", "invalid topic"), ("a in topics", "quoted"), ("'a' in topics 'b'", "unexpected"),
    ]

    @Test(arguments: badConditions)
    func conditionErrorsNameThePosition(_ bad: (String, String)) async throws {
        try await InProcessService.with { s in
            let r = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/targets:resolve", headers: s.serverHeaders,
                json: ["condition": .string(bad.0)])
            #expect(r.status == 400)
            let message = r.json?["error"]?["message"]?.stringValue ?? ""
            #expect(message.contains(bad.1) && message.contains("position"), "\(message)")
        }
    }

    @Test func conditionParserUnit() throws {
        #expect(
            try Condition.parse("'a' in topics && ('b' in topics || !('c' in topics))")
                == .and(.topic("a"), .or(.topic("b"), .not(.topic("c")))))
        #expect(
            try Condition.parse("\"x\" in topics || 'y' in topics && 'z' in topics")
                == .or(.topic("x"), .and(.topic("y"), .topic("z"))))
        #expect(throws: ConditionError.self) {
            try Condition.parse(String(repeating: "!", count: 100) + "'a' in topics")
        }
        #expect(throws: ConditionError.self) { try Condition.parse("") }
    }

    @Test func batchImportTurnsAPNsTokensIntoRegistrations() async throws {
        try await InProcessService.with { s in
            let r = try await s.request(
                "POST", "/iid/v1:batchImport", headers: s.serverHeaders,
                json: ["application": "com.example.app", "sandbox": true, "apns_tokens": ["ABCDEF0123", "not-hex"]])
            let results = try #require(r.json?["results"]?.arrayValue)
            #expect(results.first?["status"]?.stringValue == "OK")
            let token = try #require(results.first?["registration_token"]?.stringValue)
            #expect(results.last?["status"]?.stringValue == "INVALID_ARGUMENT")
            let again = try await s.request(
                "POST", "/iid/v1:batchImport", headers: s.serverHeaders,
                json: ["application": "com.example.app", "apns_tokens": ["abcdef0123"]])
            #expect(again.json?["results"]?.arrayValue?.first?["registration_token"]?.stringValue == token)
            #expect(
                try await s.request(
                    "POST", "/iid/v1:batchImport", headers: s.serverHeaders,
                    json: ["application": "com.example.app", "apns_tokens": .array((0...100).map { _ in "ab" })]
                ).status == 400)
            #expect(
                try await s.request("GET", "/iid/info/\(token)", headers: s.serverHeaders).json?["platform"]?
                    .stringValue == "IOS")
        }
    }
}

extension String {
    func replacingOccurrences(of a: String, with b: String) -> String {
        components(separatedBy: a).joined(separator: b)
    }
}

/// Topic names by the admin SDKs' rule: `(/topics/)?(private/)?[a-zA-Z0-9-_.~%]+`.
@Suite("Topic names")
struct TopicNameTests {
    @Test(arguments: [
        ("news", true), ("/topics/news", true), ("private/news", true), ("/topics/private/news", true),
        ("private/", false), ("private/private/news", false), ("news/private", false), ("/news", false), ("", false),
        (String(repeating: "a", count: 900), true), (String(repeating: "a", count: 901), false),
        ("private/" + String(repeating: "a", count: 892), true), ("a b", false),
    ])
    func theAdminSDKsRule(_ raw: String, _ valid: Bool) {
        #expect(Topic.isValid(Topic.normalize(raw)) == valid, "\(raw.prefix(40))")
    }

    @Test func privateTopicsWorkThroughTheIIDAndFCMRoutes() async throws {
        try await InProcessService.with { s in
            let r = try await s.registered(count: 1)
            let added = try await s.request(
                "POST", "/iid/v1:batchAdd", headers: s.serverHeaders,
                json: ["to": "/topics/private/vip", "registration_tokens": [.string(r[0].token)]])
            #expect(added.status == 200 && added.json?["results"]?.arrayValue?.first == [:], "\(added)")
            let members = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/topics/private%2Fvip/registrations", headers: s.serverHeaders)
            #expect(members.text.contains(r[0].fid), "\(members)")
        }
    }
}
