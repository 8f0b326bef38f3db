import Foundation
import JSON
import Testing
import TokenRegistryTesting

/// FirebaseMessaging on iOS, default token path (no FID mode): check-in, token registration, topics and delete,
/// with the SDK's exact form fields (FIRMessagingTokenFetchOperation, FIRMessagingTopicOperation,
/// FIRMessagingTokenDeleteOperation); and the GCM form with the protobuf check-in.
@Suite("Register API (check-in, register, iid/register)")
struct CheckinTests {
    static let apnsHex = "1f2e3d4c5b6a79880123456789abcdef1f2e3d4c5b6a79880123456789abcdef"

    static func form(_ fields: [(String, String)]) -> [UInt8] { Bodies.form(fields) }

    func checkIn(_ s: InProcessService) async throws -> (id: String, secret: String) {
        let reply = try await s.request(
            "POST", "/checkin", headers: ["content-type": "application/json"],
            json: [
                "checkin": [
                    "iosbuild": ["model": "iPhone14,2", "os_version": "IOS_17.0"], "type": 2, "user_number": 0,
                    "last_checkin_msec": 0,
                ],
                "fragment": 0, "locale": "en_US", "version": 2, "digest": "", "time_zone": "Europe/Berlin",
                "user_serial_number": 0, "id": 0, "security_token": 0,
            ])
        let id = try #require(reply.json?["android_id"]?.int64Value)
        let secret = try #require(reply.json?["security_token"]?.int64Value)
        #expect(reply.json?["version_info"]?.stringValue != nil)
        return (String(id), String(secret))
    }

    func register(
        _ s: InProcessService, _ device: (id: String, secret: String), _ i: CreatedInstallationReply,
        extra: [(String, String)] = [], secret: String? = nil, gmpAppID: String? = nil
    ) async throws -> Reply {
        let overridden = Set(extra.map(\.0))
        return try await s.request(
            "POST", "/register",
            headers: [
                "Authorization": "AidLogin \(device.id):\(secret ?? device.secret)", "app": "com.example.app",
                "x-goog-firebase-installations-auth": i.authToken, "info": "token-registry",
                "X-firebase-client": "fire-ios/12.19.0", "X-firebase-client-log-type": "2",
                "Content-Type": "application/x-www-form-urlencoded",
            ],
            body: Self.form(
                [
                    ("X-osv", "17.0"), ("device", device.id), ("X-scope", "*"), ("plat", "2"),
                    ("app", "com.example.app"), ("app_ver", "1.4"), ("X-cliv", "fiid-12.19.0"),
                    ("sender", "123456789012"), ("X-subtype", "123456789012"), ("appid", i.fid),
                    ("apns_token", "p_" + Self.apnsHex), ("gmp_app_id", gmpAppID ?? s.ios.id),
                ].filter { !overridden.contains($0.0) } + extra))
    }

    /// A delete exactly as `FIRMessagingTokenDeleteOperation` builds it: the standard items (with `X-scope` when the
    /// operation has a scope), `delete=true`, `iid-operation=delete` for `deleteData`, `sender` when it names one,
    /// `appid` when it has the FID. No `X-subtype`, no APNs token.
    func delete(
        _ s: InProcessService, _ device: (id: String, secret: String), _ i: CreatedInstallationReply,
        sender: String?, scope: String?, appid: Bool = true, deleteData: Bool = false
    ) async throws -> Reply {
        var items: [(String, String)] = [("X-osv", "17.0"), ("device", device.id)]
        if let scope { items.append(("X-scope", scope)) }
        items += [("plat", "2"), ("app", "com.example.app"), ("app_ver", "1.4"), ("X-cliv", "fiid-12.19.0")]
        items.append(("delete", "true"))
        if deleteData { items.append(("iid-operation", "delete")) }
        if let sender { items.append(("sender", sender)) }
        if appid { items.append(("appid", i.fid)) }
        return try await s.request(
            "POST", "/register",
            headers: [
                "Authorization": "AidLogin \(device.id):\(device.secret)", "app": "com.example.app",
                "x-goog-firebase-installations-auth": i.authToken, "Content-Type": "application/x-www-form-urlencoded",
            ], body: Self.form(items))
    }

    /// `POST /iid/register` in its shortest form: the check-in, the token, the topic.
    func subscribe(_ s: InProcessService, _ device: (id: String, secret: String), token: String, to topic: String)
        async throws -> Reply
    {
        try await s.request(
            "POST", "/iid/register",
            headers: [
                "Authorization": "AidLogin \(device.id):\(device.secret)",
                "Content-Type": "application/x-www-form-urlencoded",
            ], body: Self.form([("sender", token), ("X-gcm.topic", "/topics/\(topic)")]))
    }

    @Test func theIOSDefaultTokenPath() async throws {
        try await InProcessService.with { s in
            let device = try await checkIn(s)
            let i = try await s.createInstallation(app: s.ios)
            let registered = try await register(s, device, i)
            #expect(registered.status == 200 && registered.text.hasPrefix("token=\(i.fid):"), "\(registered)")
            // Exactly Google's answer: no line end after it (the Python client keeps one in the token).
            #expect(!registered.text.contains("\n") && registered.text.split(separator: "=").count == 2)
            let token = String(registered.text.dropFirst(6).prefix { $0 != "\n" })
            // A refresh sends the same request and keeps the token.
            #expect(try await register(s, device, i).text.hasPrefix("token=\(token)"))
            let stored = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/registrations/\(token):sendability", headers: s.serverHeaders)
            #expect(stored.json?["reason"]?.stringValue == "OK")
            // Topics through /iid/register, as FIRMessagingTopicOperation sends them.
            let topic = try await s.request(
                "POST", "/iid/register",
                headers: [
                    "Authorization": "AidLogin \(device.id):\(device.secret)", "app": "com.example.app",
                    "Content-Type": "application/x-www-form-urlencoded",
                ],
                body: Self.form([
                    ("sender", token), ("app", "com.example.app"), ("device", device.id), ("app_ver", "1.4"),
                    ("X-gcm.topic", "/topics/news"), ("X-scope", "/topics/news"),
                ]))
            #expect(topic.status == 200 && topic.text.hasPrefix("token="), "\(topic)")
            let members = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/topics/news/registrations", headers: s.serverHeaders)
            #expect(members.json?["registrations"]?.arrayValue?.first?["token"]?.stringValue == token)
            // Delete (today's SDK: delete=true; older: X-delete=1).
            let deleted = try await register(s, device, i, extra: [("delete", "true"), ("iid-operation", "delete")])
            #expect(deleted.status == 200 && deleted.text.hasPrefix("deleted="), "\(deleted)")
            #expect(try await register(s, device, i).status == 200)
            #expect(try await register(s, device, i, extra: [("X-delete", "1")]).text.hasPrefix("deleted="))
        }
    }

    @Test func badCredentialsAndOtherInstallationsAreRefusedInPlainText() async throws {
        try await InProcessService.with { s in
            let device = try await checkIn(s)
            let i = try await s.createInstallation(app: s.ios)
            let wrong = try await register(s, device, i, secret: "12345")
            #expect(wrong.status == 401 && wrong.text.hasPrefix("Error=AUTHENTICATION_FAILED"), "\(wrong)")
            let none = try await s.request(
                "POST", "/register", headers: ["Content-Type": "application/x-www-form-urlencoded"],
                body: Self.form([("app", "x")]))
            #expect(none.status == 401 && none.text.hasPrefix("Error="))
            #expect(try await register(s, device, i).status == 200)
            // The check-in now acts for that installation, or another of the same app that proves itself (the
            // device's FID changed); never for another app's.
            let otherApp = try await s.app.catalog.createApp(
                project: s.project, platform: .ios, bundleID: "com.example.other", autoInitDefault: true)
            let foreign = try await s.createInstallation(app: otherApp)
            let stolen = try await register(s, device, foreign, gmpAppID: otherApp.id)
            #expect(stolen.status == 401 && stolen.text.hasPrefix("Error="), "\(stolen)")
            let other = try await s.createInstallation(app: s.ios)
            // The appid must be the token's installation.
            let fresh = try await checkIn(s)
            let mismatch = try await register(s, fresh, other, extra: [("appid", i.fid)])
            #expect(mismatch.status == 400, "\(mismatch)")
            // An appid that names no installation any more (iOS read its FID before the token refresh that found it
            // deleted and made a new one): the token's installation is served.
            let rotated = try await register(s, try await checkIn(s), other, extra: [("appid", "cDeletedFID0000000000A")])
            #expect(rotated.status == 200 && rotated.text.hasPrefix("token=\(other.fid):"), "\(rotated)")
            // Consent is the gate here too.
            let optedOut = try await s.createInstallation(app: s.consentFirst)
            let gated = try await register(s, try await checkIn(s), optedOut, gmpAppID: s.consentFirst.id)
            #expect(gated.status == 400 && gated.text.hasPrefix("Error=FAILED_PRECONDITION"), "\(gated)")
            // A deleted installation frees nothing and answers no token.
            _ = try await s.request(
                "DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)", headers: s.serverHeaders)
            let gone = try await register(s, device, i)
            #expect(gone.status == 401 && gone.text.hasPrefix("Error="), "\(gone)")
        }
    }

    @Test func theGCMFormWithAProtobufCheckin() async throws {
        try await InProcessService.with { s in
            // AndroidCheckinRequest: checkin{type: DEVICE_CHROME_BROWSER}, version 3, user_serial_number 0.
            let request: [UInt8] = [0x22, 0x02, 0x60, 0x03, 0x70, 0x03, 0xb0, 0x01, 0x00]
            let reply = try await s.request(
                "POST", "/checkin", headers: ["Content-Type": "application/x-protobuf"], body: request)
            #expect(reply.status == 200 && reply.header("content-type") == "application/x-protobuf")
            let body = Array(reply.raw.body)
            // android_id (field 7) and security_token (field 8) as fixed64. The reply is walked field by field: a
            // search for the tag byte could land inside another field (the time, a varint, changes every run).
            func fixed64(field: UInt64) -> UInt64? {
                var at = 0
                func varint() -> UInt64? {
                    var value: UInt64 = 0
                    var shift: UInt64 = 0
                    while at < body.count, shift < 64 {
                        let byte = body[at]
                        at += 1
                        value |= UInt64(byte & 0x7f) << shift
                        if byte & 0x80 == 0 { return value }
                        shift += 7
                    }
                    return nil
                }
                while at < body.count, let key = varint() {
                    switch key & 7 {
                    case 0: guard varint() != nil else { return nil }
                    case 1:
                        guard at + 8 <= body.count else { return nil }
                        let value = (0..<8).reduce(UInt64(0)) { $0 | UInt64(body[at + $1]) << UInt64(8 * $1) }
                        if key >> 3 == field { return value }
                        at += 8
                    case 2:
                        guard let length = varint() else { return nil }
                        at += Int(length)
                    case 5: at += 4
                    default: return nil
                    }
                }
                return nil
            }
            let id = try #require(fixed64(field: 7))
            let secret = try #require(fixed64(field: 8))
            func register3(_ extra: [(String, String)] = []) async throws -> Reply {
                try await s.request(
                    "POST", "/c2dm/register3",
                    headers: [
                        "Authorization": "AidLogin \(id):\(secret)",
                        "Content-Type": "application/x-www-form-urlencoded",
                    ],
                    body: Self.form(
                        [
                            ("app", "org.chromium.linux"), ("X-subtype", "wp:receiver.push.com#abc"),
                            ("device", String(id)),
                            ("sender", "BDOU99-h67HcA6JeFXHbSNMu7e2yNNu3RzoMj8TM4W88jITfq7ZmPvIM1Iv"),
                        ] + extra))
            }
            let first = try await register3()
            #expect(first.status == 200 && first.text.hasPrefix("token="), "\(first)")
            #expect(try await register3().text == first.text)
            #expect(try await register3([("delete", "true")]).text.hasPrefix("deleted="))
            #expect(try await register3().text != first.text)
            let garbage = try await s.request(
                "POST", "/checkin", headers: ["Content-Type": "application/x-protobuf"], body: [0xff, 0xff, 0xff])
            #expect(garbage.status == 400)
        }
    }

    /// A device moved from Google presents Google's check-in with a valid installation auth token: it is enrolled
    /// and gets its token on the first try; the same unknown check-in alone (the GCM form) is refused as before, and a
    /// known check-in's id with another security token never is enrolled over it.
    @Test func aCheckinFromGoogleIsEnrolledWithAValidInstallationToken() async throws {
        try await InProcessService.with { s in
            let google = (id: "4728194729301827364", secret: "8273645546372819203")
            let i = try await s.createInstallation(app: s.ios)
            let first = try await register(s, google, i)
            #expect(first.status == 200 && first.text.hasPrefix("token=\(i.fid):"), "\(first)")
            let token = String(first.text.dropFirst(6))
            // Enrolled: its topics work with it now.
            let topic = try await subscribe(s, google, token: token, to: "news")
            #expect(topic.status == 200, "\(topic)")
            // Unknown and alone: as strict as before.
            let alone = try await s.request(
                "POST", "/register",
                headers: [
                    "Authorization": "AidLogin 5728194729301827364:1", "Content-Type": "application/x-www-form-urlencoded",
                ], body: Self.form([("app", "org.chromium.linux"), ("X-subtype", "wp:https://example.com/#1")]))
            #expect(alone.status == 401 && alone.text == "Error=AUTHENTICATION_FAILED", "\(alone)")
            // The enrolled id with another token: refused, even with a valid installation token.
            let other = try await s.createInstallation(app: s.ios)
            let hijack = try await register(s, (google.id, "1"), other)
            #expect(hijack.status == 401, "\(hijack)")
        }
    }

    /// The iOS SDK's fresh-install clean-up: the check-in the keychain kept, the new installation's auth token,
    /// `delete=true`. It succeeds: the old installation's tokens are gone (so it is no topic's target any more), and the
    /// installation itself waits for its inactivity expiry.
    @Test func theFreshInstallCleanUpRemovesWhatTheOldInstallationHeld() async throws {
        try await InProcessService.with { s in
            let device = try await checkIn(s)
            let old = try await s.createInstallation(app: s.ios)
            let registered = try await register(s, device, old)
            let oldToken = String(registered.text.dropFirst(6))
            let subscribed = try await subscribe(s, device, token: oldToken, to: "news")
            #expect(subscribed.status == 200)
            let fresh = try await s.createInstallation(app: s.ios)
            // `didDeleteFCMScopedTokensForCheckin`: no sender, no scope, no appid.
            let cleanUp = try await delete(s, device, fresh, sender: nil, scope: nil, appid: false)
            #expect(cleanUp.status == 200 && cleanUp.text == "deleted=\(oldToken)", "\(cleanUp)")
            let gone = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/registrations/\(oldToken):sendability", headers: s.serverHeaders)
            #expect(gone.json?["reason"]?.stringValue != "OK", "\(gone)")
            let members = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/topics/news/registrations", headers: s.serverHeaders)
            #expect(!members.text.contains(old.fid))
            // The old installation itself is not deleted (a check-in moves on an auth token alone: whoever held the
            // old one's could otherwise delete it for good); it expires when idle.
            #expect(try await s.app.installations.find(project: s.project, fid: old.fid) != nil)
            // The device then registers its new installation with the same check-in.
            let again = try await register(s, device, fresh)
            #expect(again.status == 200 && again.text.hasPrefix("token=\(fresh.fid):"), "\(again)")
        }
    }

    /// `retrieveFCMToken(forSenderID:)` and `deleteFCMToken(forSenderID:)`: one token per sender and scope beside the
    /// installation's own, each deleted alone; `deleteData` (`sender=*`) deletes them all. The project's own sender
    /// with scope `*` stays the registration every other route targets.
    @Test func everySenderAndScopeHasItsOwnToken() async throws {
        try await InProcessService.with { s in
            let device = try await checkIn(s)
            let i = try await s.createInstallation(app: s.ios)
            func token(_ reply: Reply) -> String { String(reply.text.dropFirst(6)) }
            func fetch(sender: String, scope: String = "*") async throws -> Reply {
                try await register(s, device, i, extra: [("sender", sender), ("X-subtype", sender), ("X-scope", scope)])
            }
            func sendable(_ token: String) async throws -> Bool {
                try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/registrations/\(token):sendability", headers: s.serverHeaders
                ).json?["reason"]?.stringValue == "OK"
            }
            let own = token(try await register(s, device, i))
            let partner = try await fetch(sender: "987654321098")
            #expect(partner.status == 200 && partner.text.hasPrefix("token=\(i.fid):"), "\(partner)")
            let partnerToken = token(partner)
            #expect(partnerToken != own)
            // The same sender and scope: the same token; another scope of the same sender: another.
            #expect(token(try await fetch(sender: "987654321098")) == partnerToken)
            let scoped = token(try await fetch(sender: "987654321098", scope: "fcm"))
            #expect(scoped != partnerToken && scoped != own)
            // The project's own sender is the installation's registration, unchanged by the others.
            #expect(token(try await fetch(sender: String(s.project.number))) == own)
            #expect(try await sendable(own))
            #expect(!(try await sendable(partnerToken)), "a sender's token is not a target of this project")
            // deleteFCMToken(forSenderID:) deletes exactly that one.
            let deleted = try await delete(s, device, i, sender: "987654321098", scope: "*")
            #expect(deleted.status == 200 && deleted.text == "deleted=\(partnerToken)", "\(deleted)")
            #expect(try await sendable(own))
            #expect(token(try await fetch(sender: "987654321098", scope: "fcm")) == scoped)
            let renewed = token(try await fetch(sender: "987654321098"))
            #expect(renewed != partnerToken && renewed.hasPrefix(i.fid + ":"))
            // Deleting a token the device no longer has succeeds and touches nothing.
            #expect(try await delete(s, device, i, sender: "555", scope: "*").text.hasPrefix("deleted="))
            #expect(try await sendable(own))
            // The wildcard only deletes; a sender of control characters is refused by name.
            let wildcard = try await fetch(sender: "*")
            #expect(wildcard.status == 400 && wildcard.text == "Error=INVALID_PARAMETERS", "\(wildcard)")
            #expect(try await fetch(sender: "a\u{1}b").status == 400)
            // deleteData: sender=*, X-scope=*, iid-operation=delete: every token of the installation.
            let all = try await delete(s, device, i, sender: "*", scope: "*", deleteData: true)
            #expect(all.status == 200 && all.text.hasPrefix("deleted="), "\(all)")
            #expect(!(try await sendable(own)))
            #expect(token(try await fetch(sender: "987654321098")) != renewed)
            #expect(token(try await fetch(sender: "987654321098", scope: "fcm")) != scoped)
        }
    }

    /// Sender tokens are bounded per installation and gated by consent like the installation's own.
    @Test func senderTokensAreBoundedAndNeedConsent() async throws {
        try await InProcessService.with { s in
            let device = try await checkIn(s)
            let i = try await s.createInstallation(app: s.ios)
            for n in 0..<32 {
                let reply = try await register(s, device, i, extra: [("sender", "sender-\(n)"), ("X-subtype", "sender-\(n)")])
                #expect(reply.status == 200, "\(reply)")
            }
            let over = try await register(s, device, i, extra: [("sender", "one-more"), ("X-subtype", "one-more")])
            #expect(over.status == 429 && over.text == "Error=RESOURCE_EXHAUSTED", "\(over)")
            // One deleted makes room again.
            #expect(try await delete(s, device, i, sender: "sender-0", scope: "*").status == 200)
            #expect(
                try await register(s, device, i, extra: [("sender", "one-more"), ("X-subtype", "one-more")]).status
                    == 200)
            let optedOut = try await s.createInstallation(app: s.consentFirst)
            let gated = try await register(
                s, try await checkIn(s), optedOut, extra: [("sender", "987654321098"), ("X-subtype", "987654321098")],
                gmpAppID: s.consentFirst.id)
            #expect(gated.status == 400 && gated.text == "Error=FAILED_PRECONDITION", "\(gated)")
        }
    }

    /// The SDK's own forms around the default token: a fetch with no `X-scope`, `deleteToken()` (the project's number,
    /// `X-scope=*`, no `X-subtype`), and `deleteData` after the device's FID changed: it deletes the tokens of the
    /// installation it names and leaves the one the check-in came from (only a delete with no sender at all is the
    /// fresh-install clean-up). A form refused for its sender moves no check-in.
    @Test func theSDKsDefaultTokenFormsAndDeleteDataAfterAnFIDChange() async throws {
        try await InProcessService.with { s in
            let device = try await checkIn(s)
            let number = String(s.project.number)
            let old = try await s.createInstallation(app: s.ios)
            let oldToken = String(try await register(s, device, old).text.dropFirst(6))
            let fresh = try await s.createInstallation(app: s.ios)
            // Refused before anything moves: the check-in still acts for the old installation.
            #expect(try await register(s, device, fresh, extra: [("sender", "*"), ("X-subtype", "*")]).status == 400)
            #expect(try await subscribe(s, device, token: oldToken, to: "news").status == 200)
            // The default token, the check-in moved to the new installation; the same with no X-scope.
            let own = try await register(s, device, fresh)
            #expect(own.text.hasPrefix("token=\(fresh.fid):"), "\(own)")
            let noScope = try await s.request(
                "POST", "/register",
                headers: [
                    "Authorization": "AidLogin \(device.id):\(device.secret)", "x-goog-firebase-installations-auth": fresh.authToken,
                    "Content-Type": "application/x-www-form-urlencoded",
                ],
                body: Self.form([("app", "com.example.app"), ("sender", number), ("X-subtype", number), ("appid", fresh.fid)]))
            #expect(noScope.text == own.text, "\(noScope)")
            let partner = String(
                try await register(s, device, fresh, extra: [("sender", "987654321098"), ("X-subtype", "987654321098")]).text
                    .dropFirst(6))
            // deleteToken(): the installation's own token only.
            let deleted = try await delete(s, device, fresh, sender: number, scope: "*")
            #expect(deleted.text == "deleted=\(own.text.dropFirst(6))", "\(deleted)")
            #expect(
                try await register(s, device, fresh, extra: [("sender", "987654321098"), ("X-subtype", "987654321098")]).text
                    == "token=\(partner)")
            // deleteData with a check-in that has moved again (another FID change): this installation's tokens, and
            // the installation it moved from stays.
            let third = try await s.createInstallation(app: s.ios)
            _ = try await register(s, device, third)
            let all = try await delete(s, device, fresh, sender: "*", scope: "*", deleteData: true)
            #expect(all.status == 200 && all.text.hasPrefix("deleted="), "\(all)")
            #expect(try await s.app.installations.find(project: s.project, fid: third.fid) != nil)
            #expect(try await s.app.installations.find(project: s.project, fid: fresh.fid) != nil)
            #expect(
                try await register(s, device, fresh, extra: [("sender", "987654321098"), ("X-subtype", "987654321098")]).text
                    != "token=\(partner)")
        }
    }
}
