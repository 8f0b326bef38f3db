import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// FCM client registrations, the refresh callback, the consent gate.
@Suite("Registrations")
struct RegistrationsTests {
    static let webBody: JSONValue = [
        "web": [
            "endpoint": "https://fcm.googleapis.com/fcm/send/abc", "auth": "c29tZS1hdXRoLWJ5dGVz",
            "p256dh": "BOr0eYQ2xY8",
            "applicationPubKey": nil,
        ]
    ]

    func fis(_ i: CreatedInstallationReply) -> [String: String] {
        ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"]
    }

    @Test func webAndIOSClientsRegisterWithFIDPrefixedTokens() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation()
            let web = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/registrations", headers: fis(i), json: Self.webBody)
            #expect(web.status == 200, "\(web)")
            let token = try #require(web.json?["token"]?.stringValue)
            #expect(token.hasPrefix(i.fid + ":"))
            #expect(web.json?["name"]?.stringValue == "projects/\(s.project.id)/registrations/\(i.fid)")
            // The weekly PATCH keeps the token.
            let patched = try await s.request(
                "PATCH", "/v1/projects/\(s.project.id)/registrations/\(token)", headers: fis(i), json: Self.webBody)
            #expect(patched.json?["token"]?.stringValue == token)
            let ios = try await s.createInstallation(app: s.ios)
            let reply = try await s.request(
                "POST", "/v1/projects/\(s.project.number)/registrations",
                headers: ["X-Goog-Firebase-Installations-Auth": ios.authToken, "X-Goog-Api-Key": s.ios.apiKey],
                json: [
                    "ios": [
                        "apns_token": "ab12cd34", "app_version": "1.2", "apns_environment": "SANDBOX",
                        "bundle_id": "com.example.app",
                    ], "fcm_sdk_version": "fcm-12.19.0",
                ])
            #expect(reply.status == 200, "\(reply)")
            #expect(reply.json?["name"]?.stringValue?.hasSuffix("/registrations/\(ios.fid)") == true)
            let deleted = try await s.request(
                "DELETE", "/v1/projects/\(s.project.id)/registrations/\(ios.fid)", headers: fis(ios))
            #expect(deleted.status == 200)
            #expect(deleted.text == "{}")
            // Again: the caller holds no such registration any more, which is what it asked for (the JS SDK's
            // deleteToken() clears its own state only on success).
            #expect(
                try await s.request(
                    "DELETE", "/v1/projects/\(s.project.id)/registrations/\(ios.fid)", headers: fis(ios)
                ).status == 200)
        }
    }

    @Test func malformedClientBodiesAre400() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation()
            for body: JSONValue in [
                [:], ["web": ["endpoint": "ftp://x", "auth": "a", "p256dh": "b"]], ["ios": ["apns_token": "zz"]],
                ["web": ["endpoint": "https://x", "auth": "a"]],
                ["ios": ["apns_token": "ab"], "web": ["endpoint": "https://x"]],
            ] {
                let r = try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/registrations", headers: fis(i), json: body)
                #expect(r.status == 400, "\(body.text) → \(r)")
            }
            #expect(
                try await s.request("POST", "/v1/projects/\(s.project.id)/registrations", json: Self.webBody).status
                    == 401)
        }
    }

    @Test func consentIsTheGate() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation(app: s.consentFirst)
            let path = "/v1/projects/\(s.project.id)/registrations"
            let refused = try await s.request("POST", path, headers: fis(i), json: Self.webBody)
            #expect(refused.status == 400)
            #expect(refused.errorStatus == "FAILED_PRECONDITION")
            #expect(refused.json?["error"]?["message"]?.stringValue?.contains("consent") == true)
            let callback = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                json: ["token": "abc:def", "platform": "android"])
            #expect(callback.errorStatus == "FAILED_PRECONDITION")
            let consent = "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent"
            #expect(try await s.request("PUT", consent, headers: fis(i), json: ["autoInitEnabled": true]).status == 200)
            let ok = try await s.request("POST", path, headers: fis(i), json: Self.webBody)
            #expect(ok.status == 200)
            let token = try #require(ok.json?["token"]?.stringValue)
            _ = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/registrations/\(token)/topicSubscriptions?topicName=news",
                headers: s.serverHeaders, json: [:])
            let sendable = "/v1/projects/\(s.project.id)/registrations/\(token):sendability"
            #expect(try await s.request("GET", sendable, headers: s.serverHeaders).json?["reason"]?.stringValue == "OK")
            // Withdrawal disables at once (and the reason named is the consent); granting again does not revive
            // until the client registers again.
            #expect(
                try await s.request("PUT", consent, headers: fis(i), json: ["autoInitEnabled": false]).status == 200)
            #expect(
                try await s.request("GET", sendable, headers: s.serverHeaders).json?["reason"]?.stringValue
                    == "NO_CONSENT")
            let members = "/v1/projects/\(s.project.id)/topics/news/registrations"
            #expect(
                try await s.request("GET", members, headers: s.serverHeaders).json?["registrations"]?.arrayValue?
                    .isEmpty == true)
            #expect(try await s.request("PUT", consent, headers: fis(i), json: ["autoInitEnabled": true]).status == 200)
            #expect(
                try await s.request("GET", sendable, headers: s.serverHeaders).json?["reason"]?.stringValue
                    == "DISABLED")
            #expect(try await s.request("POST", path, headers: fis(i), json: Self.webBody).status == 200)
            #expect(try await s.request("GET", sendable, headers: s.serverHeaders).json?["reason"]?.stringValue == "OK")
            #expect(
                try await s.request("GET", members, headers: s.serverHeaders).json?["registrations"]?.arrayValue?.count
                    == 1)
        }
    }

    @Test func refreshCallbackSupersedesMovesAndIgnoresOlder() async throws {
        try await InProcessService.with { s in
            let a = try await s.createInstallation()
            let b = try await s.createInstallation()
            let put = { (fid: String, body: JSONValue) in
                try await s.request(
                    "PUT", "/v1/projects/\(s.project.id)/installations/\(fid)/registration", headers: s.serverHeaders,
                    json: body)
            }
            let first = try await put(
                a.fid, ["token": "tok-1", "platform": "android", "clientTime": "2026-11-01T10:00:00Z"])
            #expect(first.json?["outcome"]?.stringValue == "created", "\(first)")
            #expect(
                try await put(a.fid, ["token": "tok-1", "platform": "android", "clientTime": "2026-11-01T10:00:00Z"])
                    .json?["outcome"]?.stringValue == "refreshed")
            _ = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/registrations/tok-1/topicSubscriptions?topicName=sports",
                headers: s.serverHeaders, json: [:])
            let second = try await put(
                a.fid, ["token": "tok-2", "platform": "android", "clientTime": "2026-11-02T10:00:00Z"])
            #expect(second.json?["outcome"]?.stringValue == "superseded")
            // Topics carried over to the new token.
            let topics = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/registrations/tok-2/topicSubscriptions", headers: s.serverHeaders)
            #expect(topics.json?["topicSubscriptions"]?.arrayValue?.first?["topicName"]?.stringValue == "sports")
            // An older callback arriving late does not resurrect tok-1.
            let late = try await put(
                a.fid, ["token": "tok-1", "platform": "android", "clientTime": "2026-11-01T12:00:00Z"])
            #expect(late.json?["outcome"]?.stringValue == "ignored_as_older")
            #expect(late.json?["token"]?.stringValue == "tok-2")
            #expect(
                try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/registrations/tok-1:sendability", headers: s.serverHeaders
                )
                .json?["reason"]?.stringValue == "UNKNOWN_TOKEN")
            // The token shows up under another installation: it moves there.
            let moved = try await put(b.fid, ["token": "tok-2", "platform": "android"])
            #expect(moved.json?["outcome"]?.stringValue == "moved")
            #expect(moved.json?["fid"]?.stringValue == b.fid)
            for bad: JSONValue in [
                ["platform": "android"], ["token": "has space", "platform": "android"],
                ["token": "t", "platform": "blackberry"],
                ["token": "t", "platform": "ios", "apnsEnvironment": "DEV"],
                ["token": "t", "platform": "ios", "clientTime": "yesterday"],
            ] {
                #expect(try await put(a.fid, bad).status == 400, "\(bad.text)")
            }
            #expect(
                try await s.request(
                    "PUT", "/v1/projects/\(s.project.id)/installations/\(a.fid)/registration",
                    json: ["token": "t", "platform": "web"]
                ).status == 401)
            #expect(try await put("fAAAAAAAAAAAAAAAAAAAAA", ["token": "t", "platform": "web"]).status == 404)
        }
    }

    @Test func stalenessAndExpiryFollowTheClock() async throws {
        let clock = ManualClock(Date())
        try await InProcessService.with(
            configure: {
                $0.staleDays = 30; $0.expireDays = 270
            }, clock: clock
        ) { s in
            let i = try await s.createInstallation()
            _ = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                json: ["token": "tok-stale", "platform": "web"])
            _ = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/registrations/tok-stale/topicSubscriptions?topicName=t",
                headers: s.serverHeaders, json: [:])
            let path = "/v1/projects/\(s.project.id)/registrations/tok-stale:sendability"
            clock.advance(by: 31 * 86_400)
            let stale = try await s.request("GET", path, headers: s.serverHeaders)
            #expect(stale.json?["reason"]?.stringValue == "STALE")
            #expect(stale.json?["sendable"]?.boolValue == true)
            let members = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/topics/t/registrations", headers: s.serverHeaders)
            #expect(members.json?["registrations"]?.arrayValue?.first?["stale"]?.boolValue == true)
            clock.advance(by: 240 * 86_400)
            #expect(
                try await s.request("GET", path, headers: s.serverHeaders).json?["reason"]?.stringValue == "EXPIRED")
            #expect(
                try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/topics/t/registrations", headers: s.serverHeaders
                )
                .json?["registrations"]?.arrayValue?.isEmpty == true)
            // The expiry is reported once in the change feed.
            #expect(try await s.app.jobs.reportExpiredRegistrations() == 1)
            #expect(try await s.app.jobs.reportExpiredRegistrations() == 0)
            for _ in 0..<100 where try await s.app.jobs.relayEvents() == 0 {
                try await Task.sleep(for: .milliseconds(50))
            }
            let feed = try await s.request("GET", "/v1/projects/\(s.project.id)/events", headers: s.serverHeaders)
            #expect(
                feed.json?["events"]?.arrayValue?.contains { $0["type"]?.stringValue == "registration.expired" } == true
            )
        }
    }

    @Test func deletedInstallationsTokensReportDeleted() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation()
            let token = try #require(
                try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/registrations", headers: fis(i), json: Self.webBody
                ).json?["token"]?.stringValue)
            #expect(
                try await s.request(
                    "DELETE", "/v1/projects/\(s.project.id)/installations/\(i.fid)", headers: s.serverHeaders
                ).status == 200)
            #expect(
                try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/registrations/\(token):sendability", headers: s.serverHeaders
                )
                .json?["reason"]?.stringValue == "DELETED")
        }
    }
}

/// The JS SDK's weekly refresh and its `deleteToken()`, for a token the caller does not hold (firebase-js-sdk
/// messaging `requestUpdateToken`: anything but `{token}` is rethrown; `requestDeleteToken`: an error stops it
/// clearing IndexedDB).
@Suite("Web SDK refresh and delete of another token")
struct WebRefreshTests {
    func fis(_ i: CreatedInstallationReply) -> [String: String] {
        ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"]
    }

    @Test func aPatchOfATokenTheCallerDoesNotHoldRegistersTheCallerAndAnswersItsToken() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation()
            // A token from Google (never registered here), then one of another installation.
            let other = try await s.createInstallation()
            let othersToken = try #require(
                try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/registrations", headers: fis(other),
                    json: Bodies.webRegistration
                ).json?["token"]?.stringValue)
            for stale in ["dGoogleIssuedToken:APA91bHPRgkF", othersToken] {
                let patched = try await s.request(
                    "PATCH", "/v1/projects/\(s.project.id)/registrations/\(stale)", headers: fis(i),
                    json: Bodies.webRegistration)
                #expect(patched.status == 200, "\(patched)")
                let token = try #require(patched.json?["token"]?.stringValue)
                #expect(token.hasPrefix(i.fid + ":"), "the caller's own token")
            }
            // The other installation keeps its registration.
            let sendable = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/registrations/\(othersToken):sendability", headers: s.serverHeaders)
            #expect(sendable.json?["reason"]?.stringValue == "OK")
        }
    }

    @Test func aDeleteOfATokenTheCallerDoesNotHoldSucceedsAndTouchesNothing() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation()
            let own = try #require(
                try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/registrations", headers: fis(i), json: Bodies.webRegistration
                ).json?["token"]?.stringValue)
            let deleted = try await s.request(
                "DELETE", "/v1/projects/\(s.project.id)/registrations/dGoogleIssuedToken:APA91bHPRgkF", headers: fis(i))
            #expect(deleted.status == 200 && deleted.json == [:], "\(deleted)")
            let sendable = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/registrations/\(own):sendability", headers: s.serverHeaders)
            #expect(sendable.json?["reason"]?.stringValue == "OK", "the caller's own registration stays")
        }
    }

    @Test func withConsentOffThePatchSaysWhereConsentIsGiven() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation(app: s.consentFirst)
            let patched = try await s.request(
                "PATCH", "/v1/projects/\(s.project.id)/registrations/dGoogleIssuedToken:APA91bHPRgkF", headers: fis(i),
                json: Bodies.webRegistration)
            #expect(patched.status == 400 && patched.errorStatus == "FAILED_PRECONDITION", "\(patched)")
            let message = patched.json?["error"]?["message"]?.stringValue ?? ""
            #expect(message.contains("/installations/\(i.fid)/consent") && message.contains("autoInitEnabled"))
        }
    }
}
