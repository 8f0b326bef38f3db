import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// Send feedback's routes with the exact bodies each sender documents, and the classification table they apply.
@Suite("Send feedback routes")
struct FeedbackRouteTests {
    /// https://firebase.google.com/docs/cloud-messaging/error-codes (HTTP v1 error responses), and the FCM v1
    /// ErrorCode reference: an unregistered token, example 2 (an invalid registration token) and example 1 (an
    /// invalid value in a data message).
    static let unregistered: JSONValue = [
        "error": [
            "code": 404, "message": "Requested entity was not found.", "status": "NOT_FOUND",
            "details": [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "UNREGISTERED"]],
        ]
    ]
    static let invalidToken: JSONValue = [
        "error": [
            "code": 400, "message": "The registration token is not a valid FCM registration token",
            "status": "INVALID_ARGUMENT",
            "details": [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "INVALID_ARGUMENT"]],
        ]
    ]
    static let invalidData: JSONValue = [
        "error": [
            "code": 400, "message": "Invalid value at 'message.data[0].value' (TYPE_STRING), 12",
            "status": "INVALID_ARGUMENT",
            "details": [
                [
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [
                        [
                            "field": "message.data[0].value",
                            "description": "Invalid value at 'message.data[0].value' (TYPE_STRING), 12",
                        ]
                    ],
                ]
            ],
        ]
    ]

    static func fcmError(_ code: String, _ status: String, _ http: Int) -> JSONValue {
        [
            "error": [
                "code": .int(Int64(http)), "message": "x", "status": .string(status),
                "details": [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": .string(code)]],
            ]
        ]
    }

    @Test func theClassificationTable() {
        let fcm: [(JSONValue, FeedbackClass)] = [
            (Self.unregistered, .dead), (Self.invalidToken, .dead), (Self.invalidData, .badMessage),
            (Self.fcmError("SENDER_ID_MISMATCH", "PERMISSION_DENIED", 403), .senderConfig),
            (Self.fcmError("THIRD_PARTY_AUTH_ERROR", "UNAUTHENTICATED", 401), .senderConfig),
            (Self.fcmError("QUOTA_EXCEEDED", "RESOURCE_EXHAUSTED", 429), .transient),
            (Self.fcmError("UNAVAILABLE", "UNAVAILABLE", 503), .transient),
            (Self.fcmError("INTERNAL", "INTERNAL", 500), .transient),
            (["error": ["code": 404, "message": "Requested entity was not found.", "status": "NOT_FOUND"]], .suspect),
            (["error": ["code": 418, "status": "SOMETHING_NEW"]], .unknown), ([:], .unknown),
        ]
        for (body, expected) in fcm {
            #expect(FeedbackClassifier.fcm(body).feedbackClass == expected, "\(body)")
        }
        // Apple's table of status codes and reasons (Handling notification responses from APNs).
        let apns: [(Int, String?, FeedbackClass)] = [
            (410, "Unregistered", .dead), (410, "ExpiredToken", .dead), (400, "BadDeviceToken", .suspect),
            (400, "DeviceTokenNotForTopic", .senderConfig), (400, "TopicDisallowed", .senderConfig),
            (403, "BadCertificateEnvironment", .senderConfig), (403, "InvalidProviderToken", .senderConfig),
            (403, "ExpiredProviderToken", .senderConfig), (400, "PayloadEmpty", .badMessage),
            (413, "PayloadTooLarge", .badMessage), (400, "BadExpirationDate", .badMessage),
            (429, "TooManyRequests", .transient), (500, "InternalServerError", .transient),
            (503, "ServiceUnavailable", .transient), (503, "Shutdown", .transient), (200, nil, .delivered),
            (410, nil, .dead), (400, "SomethingNew", .unknown),
        ]
        for (status, reason, expected) in apns {
            #expect(
                FeedbackClassifier.apns(status: status, reason: reason, timestamp: nil).feedbackClass == expected,
                "\(status) \(reason ?? "")")
        }
        let webpush: [(Int, FeedbackClass)] = [
            (201, .delivered), (404, .dead), (410, .dead), (401, .senderConfig), (403, .senderConfig),
            (400, .badMessage), (413, .badMessage), (429, .transient), (502, .transient), (301, .unknown),
        ]
        for (status, expected) in webpush { #expect(FeedbackClassifier.webpush(status: status).feedbackClass == expected) }
        let legacy: [(String, FeedbackClass)] = [
            ("NotRegistered", .dead), ("InvalidRegistration", .dead), ("MismatchSenderId", .senderConfig),
            ("MessageTooBig", .badMessage), ("Unavailable", .transient), ("Whatever", .unknown),
        ]
        for (code, expected) in legacy { #expect(FeedbackClassifier.legacy(code).feedbackClass == expected) }
        #expect(FeedbackClassifier.gorush(type: "failed-push", platform: "ios", error: "Unregistered")?.feedbackClass == .dead)
        #expect(
            FeedbackClassifier.gorush(type: "failed-push", platform: "android", error: "Requested entity was not found.")?
                .feedbackClass == .dead)
        #expect(FeedbackClassifier.gorush(type: "succeeded-push", platform: "android", error: "")?.feedbackClass == .delivered)
        #expect(FeedbackClassifier.gorush(type: "failed-push", platform: "huawei", error: "x") == nil)
        // The APNs timestamp is milliseconds.
        #expect(
            FeedbackClassifier.apns(status: 410, reason: "Unregistered", timestamp: 1_764_000_000_000).invalidSince
                == Date(timeIntervalSince1970: 1_764_000_000))
    }

    @Test func aBatchIsDecidedInOrderAndBadItemsAreNamed() async throws {
        try await InProcessService.with { s in
            let regs = try await s.registered(count: 2)
            let base = "/v1/projects/\(s.project.id)"
            let reply = try await s.request(
                "POST", "\(base)/feedback", headers: s.serverHeaders,
                json: [
                    "results": [
                        ["token": .string(regs[0].token), "fcm": Self.unregistered],
                        ["token": .string(regs[1].token), "fcm": Self.invalidData],
                        ["token": .string(regs[1].token), "apns": ["status": "410"]],
                        ["token": "not a token", "legacy": "NotRegistered"],
                        ["token": .string(regs[1].token), "fcm": Self.unregistered, "legacy": "NotRegistered"],
                        ["token": .string(regs[1].token + "-gone"), "webpush": ["status": 410]],
                    ]
                ])
            #expect(reply.status == 200, "\(reply)")
            let decisions = try #require(reply.json?["decisions"]?.arrayValue)
            #expect(decisions.map { $0["action"]?.stringValue } == [
                "retired", "ignored", "rejected", "rejected", "rejected", "not_current",
            ])
            #expect(decisions[0]["class"] == "dead" && decisions[0]["code"] == "UNREGISTERED")
            #expect(decisions[1]["class"] == "bad_message")
            #expect(decisions[2]["error"]?.stringValue?.hasPrefix("results[2].apns.status") == true, "\(decisions[2])")
            #expect(decisions[3]["error"]?.stringValue?.hasPrefix("results[3].token") == true)
            #expect(decisions[4]["error"]?.stringValue?.contains("exactly one") == true)
            // What retired says why; what stayed is still sendable.
            let gone = try await s.request(
                "GET", "\(base)/registrations/\(regs[0].token):sendability", headers: s.serverHeaders)
            #expect(gone.json?["reason"] == "RETIRED" && gone.json?["retiredReason"] == "UNREGISTERED", "\(gone)")
            #expect(
                try await s.request("GET", "\(base)/registrations/\(regs[1].token):sendability", headers: s.serverHeaders)
                    .json?["reason"] == "OK")
            // Limits: a batch of more than 1000, a body that is not one.
            let tooMany = JSONValue.array((0..<1001).map { _ in ["token": "a", "legacy": "NotRegistered"] })
            let over = try await s.request("POST", "\(base)/feedback", headers: s.serverHeaders, json: ["results": tooMany])
            #expect(over.status == 400 && over.text.contains("results"), "\(over)")
            #expect(try await s.request("POST", "\(base)/feedback", headers: s.serverHeaders, json: [:]).status == 400)
            // The report counts it.
            let report = try await s.request("GET", "\(base)/hygiene", headers: s.serverHeaders)
            #expect(report.json?["registrations"]?["retired"] == 1, "\(report)")
            #expect(report.json?["retiredByReason"]?["UNREGISTERED"] == 1)
            let fcm = report.json?["recentFeedback"]?["channels"]?.arrayValue?.first { $0["channel"] == "fcm" }
            #expect(fcm?["byClass"]?["dead"] == 1 && fcm?["byClass"]?["bad_message"] == 1, "\(report)")
        }
    }

    /// gorush posts `logx.LogPushEntry` to `feedback_hook_url` with the headers of `feedback_header` split at the
    /// colon (`Authorization: Bearer <key>` arrives as ` Bearer <key>`, whose leading space the HTTP parser drops as
    /// optional whitespace, RFC 9110 §5.5).
    @Test func gorushsHookBodyIsAcceptedAsGorushSendsIt() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation(app: s.ios)
            let device = String(repeating: "c0", count: 32)
            _ = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                json: ["token": .string(i.fid + ":ios"), "platform": "ios", "apnsToken": .string(device)])
            let hook = "/v1/projects/\(s.project.id)/feedback:gorush"
            let headers = ["Authorization": "Bearer \(s.serverKey)", "Content-Type": "application/json; charset=utf-8"]
            let reply = try await s.request(
                "POST", hook, headers: headers,
                json: [
                    "notif_id": "", "type": "failed-push", "platform": "ios", "token": .string(device),
                    "message": "Welcome", "error": "Unregistered",
                ])
            #expect(reply.status == 200 && reply.json?["decisions"]?.arrayValue?.first?["action"] == "retired", "\(reply)")
            // A hidden token cannot be matched: rejected, saying how to fix it.
            let hidden = try await s.request(
                "POST", hook, headers: headers,
                json: ["type": "failed-push", "platform": "android", "token": "**********abc**********", "error": "x"])
            #expect(hidden.json?["decisions"]?.arrayValue?.first?["error"]?.stringValue?.contains("hide_token") == true, "\(hidden)")
            // An array of entries, a success among them.
            let batch = try await s.request(
                "POST", hook, headers: headers,
                json: [
                    ["type": "succeeded-push", "platform": "android", "token": "abc", "message": "", "error": ""],
                    ["type": "failed-push", "platform": "android", "token": "abc", "error": "Requested entity was not found."],
                ])
            #expect(batch.json?["decisions"]?.arrayValue?.map { $0["action"]?.stringValue } == ["ignored", "not_current"])
        }
    }

    /// The breaker from the routes: a batch of 100 dead tokens trips it; what it holds stays targeted, marked; the
    /// operator clears it.
    @Test func theBreakerIsReportedAndClearedThroughTheRoutes() async throws {
        try await InProcessService.with { s in
            let regs = try await s.registered(count: 100)
            let base = "/v1/projects/\(s.project.id)"
            _ = try await s.request(
                "POST", "\(base)/registrations/\(regs[0].token)/topicSubscriptions?topicName=news", headers: s.serverHeaders,
                json: [:])
            let failures = JSONValue.array(regs.map { ["token": .string($0.token), "fcm": Self.unregistered] })
            let tripped = try await s.request("POST", "\(base)/feedback", headers: s.serverHeaders, json: ["results": failures])
            #expect(tripped.json?["decisions"]?.arrayValue?.first?["action"] == "quarantined", "\(tripped)")
            let members = try await s.request("GET", "\(base)/topics/news/registrations", headers: s.serverHeaders)
            #expect(members.json?["registrations"]?.arrayValue?.first?["quarantined"] == true, "\(members)")
            let report = try await s.request("GET", "\(base)/hygiene", headers: s.serverHeaders)
            #expect(report.json?["breakers"]?.arrayValue?.first?["state"] == "tripped" && report.json?["breakers"]?.arrayValue?.first?["failing"] == 100)
            #expect(try await s.request("GET", "/metrics").text
                .contains("registry_feedback_breaker_tripped{project=\"\(s.project.id)\",channel=\"fcm\"} 1"))
            let wrong = try await s.request("POST", "\(base)/hygiene/breakers/sms:clear", headers: s.serverHeaders, json: [:])
            #expect(wrong.status == 400)
            let confirmed = try await s.request(
                "POST", "\(base)/hygiene/breakers/fcm:clear", headers: s.serverHeaders, json: ["confirm": true])
            #expect(confirmed.json?["retired"] == 100, "\(confirmed)")
            let again = try await s.request("POST", "\(base)/hygiene/breakers/fcm:clear", headers: s.serverHeaders, json: [:])
            #expect(again.status == 400 && again.json?["error"]?["status"] == "FAILED_PRECONDITION")
        }
    }
}
