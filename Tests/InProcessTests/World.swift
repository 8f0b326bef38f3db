import Crypto
import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// An in-process service with what the routes act on: installations, a registration, a linked service with a
/// delivery awaiting its acknowledgement, a device check-in; and a second project whose credentials must count for
/// nothing here.
struct World {
    let s: InProcessService
    /// A web installation with a registration subscribed to `news`.
    let installation: CreatedInstallationReply
    let token: String
    /// The linked service `crm`, with the secret it rotated to itself.
    let serviceSecret: String
    /// The other project's server key, API key and an installation auth token of it.
    let otherServerKey: String
    let otherAPIKey: String
    let otherAuthToken: String

    var project: String { s.project.id }
    var base: String { "/v1/projects/\(s.project.id)" }

    static let webBody: JSONValue = [
        "web": [
            "endpoint": "https://fcm.googleapis.com/fcm/send/abc", "auth": "c29tZS1hdXRoLWJ5dGVz",
            "p256dh": "BOr0eYQ2xY8",
        ]
    ]

    static func with(_ body: (World) async throws -> Void) async throws {
        try await InProcessService.with(configure: { c in
            c.metricsToken = "in-process-metrics"
            c.checkinRatePerAddress = 1000
            c.createRatePerAddress = 1000
            c.createRatePerKey = 1000
        }) { s in
            let installation = try await s.createInstallation()
            let registered = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/registrations",
                headers: ["x-goog-firebase-installations-auth": "FIS \(installation.authToken)"], json: webBody)
            let token = try #require(registered.json?["token"]?.stringValue, "\(registered)")
            let other = Project(id: "other-proj", number: 987_654_321)
            let otherKey = try await s.app.catalog.createProject(id: other.id, number: other.number)
            let otherApp = try await s.app.catalog.createApp(
                project: other, platform: .web, bundleID: nil, autoInitDefault: true)
            let otherInstallation = try await s.request(
                "POST", "/v1/projects/\(other.id)/installations", headers: ["x-goog-api-key": otherApp.apiKey],
                json: ["fid": "", "authVersion": "FIS_v2", "appId": .string(otherApp.id), "sdkVersion": "w:0.6.24"])
            let otherAuth = try #require(otherInstallation.json?["authToken"]?["token"]?.stringValue)
            // A linked service that holds its own secret (it rotated with the one the project was handed).
            let (_, handedOut) = try await s.app.deletions.addLinkedService(
                projectID: s.project.id, name: "crm", endpoint: "https://crm.example/hook")
            let own = try #require(
                try await s.app.deletions.rotateSecretAsService(
                    projectID: s.project.id, name: "crm",
                    signature: WebhookSignature.header(
                        secrets: [handedOut], timestamp: Int64(Date().timeIntervalSince1970), body: [],
                        for: .rotation(project: s.project.id, service: "crm")), body: []))
            try await body(
                World(
                    s: s, installation: installation, token: token, serviceSecret: own.secret,
                    otherServerKey: otherKey, otherAPIKey: otherApp.apiKey, otherAuthToken: otherAuth))
        }
    }

    // MARK: - Requests

    var server: [String: String] { s.serverHeaders }
    func fis(_ i: CreatedInstallationReply) -> [String: String] {
        ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"]
    }

    /// Sends the request and expects a 2xx.
    @discardableResult
    func ok(
        _ method: String, _ path: String, headers: [String: String] = [:], json: JSONValue? = nil,
        body: [UInt8]? = nil, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> Reply {
        let reply =
            if let json { try await s.request(method, path, headers: headers, json: json) } else {
                try await s.request(method, path, headers: headers, body: body)
            }
        #expect((200..<300).contains(reply.status), "\(method) \(path): \(reply)", sourceLocation: sourceLocation)
        return reply
    }

    /// A `Registry-Signature` of the linked service for `purpose` over `body`.
    func signature(_ body: [UInt8], for purpose: WebhookSignature.Purpose, secret: String? = nil) -> String {
        WebhookSignature.header(
            secrets: [secret ?? serviceSecret], timestamp: Int64(Date().timeIntervalSince1970), body: body,
            for: purpose)
    }

    /// A form body, percent-encoded.
    static func form(_ fields: [(String, String)]) -> [UInt8] { Bodies.form(fields) }

    /// A device check-in: its `AidLogin` header value.
    func checkIn() async throws -> String {
        let reply = try await ok("POST", "/checkin", json: ["checkin": [:], "id": 0, "security_token": 0])
        let id = try #require(reply.json?["android_id"]?.int64Value)
        let secret = try #require(reply.json?["security_token"]?.int64Value)
        return "AidLogin \(id):\(secret)"
    }

    /// A service account's signed assertion for `POST /token`.
    func assertion() async throws -> String {
        let file = try await s.app.services.serviceAccounts.create(project: s.project, baseURL: "https://r.example")
        let key = try RSAKey(pem: try #require(file["private_key"]?.stringValue))
        let now = Int64(Date().timeIntervalSince1970)
        let header = JSONValue.object([("alg", "RS256"), ("kid", .string(try #require(file["private_key_id"]?.stringValue)))])
        let claims = JSONValue.object([
            ("iss", .string(try #require(file["client_email"]?.stringValue))), ("aud", "https://r.example/token"),
            ("iat", .int(now)), ("exp", .int(now + 600)),
        ])
        let input = Base64URL.encode(header.encoded()) + "." + Base64URL.encode(claims.encoded())
        return input + "." + Base64URL.encode(try key.sign(Array(input.utf8)))
    }
}
