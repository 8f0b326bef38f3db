import Crypto
import Foundation
import HTTP
import JSON
import Registry
import Testing
import TokenRegistryTesting

@testable import API

/// The FIS v1 routes, row by row of the reference's §1.9 checklist, with each real client's request shape.
@Suite("Installations (FIS v1)")
struct InstallationsTests {
    static let validFID22 = "dIsVQ2QVRT-TsRovAPrE3U"
    static let validFID11 = "fAbCdEfGh_1"

    static let unacceptableFIDs: [String] = [
        "", "d+HpS5GGsk4TIJxfsyPF3wA=", "aIsVQ2QVRT-TsRovAPrE3U", "short", "dIsVQ2QVRT-TsRovAPrE3U-toolong", "ë",
    ]

    func checkCreated(_ reply: Reply, service: InProcessService) throws -> (fid: String, refresh: String, token: String) {
        #expect(reply.status == 200, "\(reply)")
        let json = try #require(reply.json)
        let fid = try #require(json["fid"]?.stringValue)
        #expect(json["name"]?.stringValue == "projects/\(service.project.number)/installations/\(fid)")
        let refresh = try #require(json["refreshToken"]?.stringValue)
        #expect(refresh.hasPrefix("3_") && refresh.count > 40)
        let token = try #require(json["authToken"]?["token"]?.stringValue)
        #expect(json["authToken"]?["expiresIn"]?.stringValue == "604800s")
        return (fid, refresh, token)
    }

    @Test func jsShapedCreateKeepsAValidFID() async throws {
        try await InProcessService.with { s in
            let reply = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations",
                headers: ["x-goog-api-key": s.web.apiKey, "Accept": "application/json"],
                json: [
                    "fid": .string(Self.validFID22), "authVersion": "FIS_v2", "appId": .string(s.web.id),
                    "sdkVersion": "w:0.6.24",
                ])
            let created = try checkCreated(reply, service: s)
            #expect(created.fid == Self.validFID22)
        }
    }

    @Test func iosShapedCreateWithTrailingSlashAndProjectNumber() async throws {
        try await InProcessService.with { s in
            let reply = try await s.request(
                "POST", "/v1/projects/\(s.project.number)/installations/",
                headers: ["X-Goog-Api-Key": s.ios.apiKey, "X-Ios-Bundle-Identifier": "com.example.app"],
                json: [
                    "appId": .string(s.ios.id), "fid": .string(Self.validFID11), "authVersion": "FIS_v2",
                    "sdkVersion": "i:12.19.0",
                ])
            let created = try checkCreated(reply, service: s)
            #expect(created.fid == Self.validFID11)
            // iOS generate: body without appId, trailing slash on delete with a {} body.
            let generated = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(created.fid)/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(created.refresh)", "X-Goog-Api-Key": s.ios.apiKey],
                json: ["installation": ["sdkVersion": "i:12.19.0"]])
            #expect(generated.status == 200)
            #expect(generated.json?["expiresIn"]?.stringValue == "604800s")
            let deleted = try await s.request(
                "DELETE", "/v1/projects/\(s.project.id)/installations/\(created.fid)/",
                headers: ["Authorization": "FIS_v2 \(created.refresh)", "X-Goog-Api-Key": s.ios.apiKey],
                json: [:])
            #expect(deleted.status == 200)
            #expect(deleted.text == "{}")
        }
    }

    @Test(arguments: unacceptableFIDs)
    func unacceptableFIDsAreReplaced(_ sent: String) async throws {
        try await InProcessService.with { s in
            // firebase-messaging sends JSON as text/plain with a padded standard-base64 FID.
            let reply = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations",
                headers: ["x-goog-api-key": s.web.apiKey, "Content-Type": "text/plain; charset=utf-8"],
                json: [
                    "appId": .string(s.web.id), "authVersion": "FIS_v2", "fid": .string(sent), "sdkVersion": "w:0.6.6",
                ])
            let created = try checkCreated(reply, service: s)
            #expect(created.fid != sent)
            #expect(created.fid.range(of: "^[cdef][A-Za-z0-9_-]{21}$", options: .regularExpression) != nil)
        }
    }

    @Test func missingOrNullFIDIsGenerated() async throws {
        try await InProcessService.with { s in
            for body: JSONValue in [["appId": .string(s.web.id)], ["appId": .string(s.web.id), "fid": nil]] {
                let reply = try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/installations", headers: ["x-goog-api-key": s.web.apiKey],
                    json: body)
                _ = try checkCreated(reply, service: s)
            }
        }
    }

    @Test func anFIDInUseOrDeletedIsNeverHandedOutAgain() async throws {
        try await InProcessService.with { s in
            let first = try await s.createInstallation(fid: Self.validFID22)
            #expect(first.fid == Self.validFID22)
            let second = try await s.createInstallation(fid: Self.validFID22)
            #expect(second.fid != Self.validFID22)
            let deleted = try await s.request(
                "DELETE", "/v1/projects/\(s.project.id)/installations/\(first.fid)",
                headers: ["Authorization": "FIS_v2 \(first.refreshToken)"])
            #expect(deleted.status == 200)
            let third = try await s.createInstallation(fid: Self.validFID22)
            #expect(third.fid != Self.validFID22)
        }
    }

    @Test func authTokenIsAnES256JWTWithFirebaseClaims() async throws {
        try await InProcessService.with { s in
            let created = try await s.createInstallation()
            let parts = try #require(JWS.parse(created.authToken))
            let header = try JSONParser.parse(parts.header)
            #expect(header["alg"]?.stringValue == "ES256")
            let kid = try #require(header["kid"]?.stringValue)
            let claims = try JSONParser.parse(parts.payload)
            #expect(claims["appId"]?.stringValue == s.web.id)
            #expect(claims["fid"]?.stringValue == created.fid)
            #expect(claims["projectNumber"] == .number(String(s.project.number)))
            let iat = try #require(claims["iat"]?.int64Value)
            #expect(claims["exp"]?.int64Value == iat + 604_800)
            // The JWKS publishes the key that verifies it.
            let jwks = try #require(try await s.request("GET", "/.well-known/jwks.json").json)
            let key = try #require(jwks["keys"]?.arrayValue?.first { $0["kid"]?.stringValue == kid })
            let x = try #require(Base64URL.decode(key["x"]?.stringValue ?? ""))
            let y = try #require(Base64URL.decode(key["y"]?.stringValue ?? ""))
            let publicKey = try ES256PublicKey(x: x, y: y)
            #expect(publicKey.verify(signature: parts.signature, for: parts.signingInput))
        }
    }

    @Test func generateRejectsWrongTokensWithCodeEqualToStatus() async throws {
        try await InProcessService.with { s in
            let created = try await s.createInstallation()
            let path = "/v1/projects/\(s.project.id)/installations/\(created.fid)/authTokens:generate"
            let wrong = try await s.request(
                "POST", path, headers: ["Authorization": "FIS_v2 3_wrong", "x-goog-api-key": s.web.apiKey])
            #expect(wrong.status == 401)
            #expect(wrong.errorCode == 401)
            let missing = try await s.request("POST", path)
            #expect(missing.status == 401)
            let unknown = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/fAAAAAAAAAAAAAAAAAAAAA/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(created.refreshToken)"])
            #expect(unknown.status == 404)
            #expect(unknown.errorCode == 404)
            let notJSON = try await s.request(
                "POST", path, headers: ["Authorization": "FIS_v2 \(created.refreshToken)"], body: Array("{".utf8))
            #expect(notJSON.status == 400)
        }
    }

    @Test func deleteReturnsEmptyObjectAndTokensStopAtOnce() async throws {
        try await InProcessService.with { s in
            let created = try await s.createInstallation()
            let consentPath = "/v1/projects/\(s.project.id)/installations/\(created.fid)/consent"
            #expect(
                try await s.request(
                    "GET", consentPath, headers: ["x-goog-firebase-installations-auth": created.authToken]
                ).status == 200)
            let wrong = try await s.request(
                "DELETE", "/v1/projects/\(s.project.id)/installations/\(created.fid)",
                headers: ["Authorization": "FIS_v2 3_x"])
            #expect(wrong.status == 401)
            let deleted = try await s.request(
                "DELETE", "/v1/projects/\(s.project.id)/installations/\(created.fid)",
                headers: ["Authorization": "FIS_v2 \(created.refreshToken)"])
            #expect(deleted.status == 200)
            #expect(deleted.json == .object([]))
            let after = try await s.request(
                "GET", consentPath, headers: ["x-goog-firebase-installations-auth": created.authToken])
            #expect(after.status == 401)
            let again = try await s.request(
                "DELETE", "/v1/projects/\(s.project.id)/installations/\(created.fid)",
                headers: ["Authorization": "FIS_v2 \(created.refreshToken)"])
            #expect(again.status == 404)
            let refresh = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(created.fid)/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(created.refreshToken)"])
            #expect(refresh.status == 404)
        }
    }

    @Test func serverAndAdminDeletes() async throws {
        try await InProcessService.with { s in
            let created = try await s.createInstallation()
            let admin = "/v1/project/\(s.project.id)/instanceId/\(created.fid)"
            #expect(try await s.request("DELETE", admin).status == 401)
            #expect(try await s.request("DELETE", admin, headers: s.serverHeaders).status == 200)
            #expect(try await s.request("DELETE", admin, headers: s.serverHeaders).status == 409)
            #expect(
                try await s.request(
                    "DELETE", "/v1/project/\(s.project.id)/instanceId/fAAAAAAAAAAAAAAAAAAAAA", headers: s.serverHeaders
                ).status == 404)
            #expect(
                try await s.request(
                    "DELETE", "/v1/project/\(s.project.id)/instanceId/not-a-fid", headers: s.serverHeaders
                ).status == 400)
            let other = try await s.createInstallation()
            let viaFIS = try await s.request(
                "DELETE", "/v1/projects/\(s.project.id)/installations/\(other.fid)", headers: s.serverHeaders)
            #expect(viaFIS.status == 200)
        }
    }

    @Test func apiKeyAndAppChecks() async throws {
        try await InProcessService.with { s in
            let other = try await s.addProject(id: "other-proj", number: 99_999)
            let path = "/v1/projects/\(s.project.id)/installations"
            let body: JSONValue = ["appId": .string(s.web.id), "authVersion": "FIS_v2"]
            #expect(try await s.request("POST", path, json: body).status == 403)
            let bogus = try await s.request(
                "POST", path, headers: ["x-goog-api-key": "AIzaNotARealKeyButTheRightLength123456"], json: body)
            #expect(bogus.status == 400)
            #expect(bogus.errorCode == 400)
            #expect(
                try await s.request("POST", path, headers: ["x-goog-api-key": other.app.apiKey], json: body).status
                    == 403)
            let foreignApp = try await s.request(
                "POST", path, headers: ["x-goog-api-key": s.web.apiKey], json: ["appId": .string(other.app.id)])
            #expect(foreignApp.status == 403)
            #expect(
                try await s.request("POST", path, headers: ["x-goog-api-key": s.web.apiKey], json: ["appId": "nope"])
                    .status == 400)
            #expect(try await s.request("POST", path + "?key=\(s.web.apiKey)", json: body).status == 200)
            #expect(
                try await s.request(
                    "POST", "/v1/projects/no-such-project/installations", headers: ["x-goog-api-key": s.web.apiKey],
                    json: body
                ).status == 403)
        }
    }

    static let badBodies: [(String, String)] = [
        ("[]", "body"), ("\"x\"", "body"), ("{\"appId\":5}", "appId"),
        ("{\"appId\":\"1:1:web:a\",\"sdkVersion\":7}", "sdkVersion"),
        ("{\"appId\":\"1:1:web:a\",\"authVersion\":\"FIS_v1\"}", "authVersion"), ("{}", "appId"),
        ("{\"appId\":\"\"}", "appId"),
        ("{\"appId\":\"1:1:web:a\",\"sdkVersion\":\"\(String(repeating: "v", count: 100))\"}", "sdkVersion"),
        ("{\"a\":1,\"a\":2}", "duplicate"),
        ("{\"appId\":\"1:1:web:a\",\"sdkVersion\":\"a\\u0000b\"}", "sdkVersion"), ("", "body"),
    ]

    @Test(arguments: badBodies)
    func malformedBodiesGet400NamingTheField(_ bad: (String, String)) async throws {
        try await InProcessService.with { s in
            let reply = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations", headers: ["x-goog-api-key": s.web.apiKey],
                body: Array(bad.0.utf8))
            #expect(reply.status == 400, "\(bad.0) → \(reply)")
            #expect(reply.errorCode == 400)
            #expect(reply.json?["error"]?["message"]?.stringValue?.contains(bad.1) == true, "\(reply)")
        }
    }

    @Test func creationIsRateLimitedWithRetryAfter() async throws {
        try await InProcessService.with(configure: { $0.createRatePerAddress = 1 }) { s in
            var statuses: [Int] = []
            for _ in 0..<4 {
                let r = try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/installations", headers: ["x-goog-api-key": s.web.apiKey],
                    json: ["appId": .string(s.web.id)])
                statuses.append(r.status)
                if r.status == 429 {
                    #expect(r.header("retry-after").flatMap(Int.init) ?? 0 >= 1)
                    #expect(r.errorStatus == "RESOURCE_EXHAUSTED")
                }
            }
            #expect(statuses.prefix(2) == [200, 200])
            #expect(statuses.contains(429))
        }
    }

    /// A token Google signed (an ES256 JWT in FIS's shape, under a key this service never had), as a device that moved
    /// here presents it for up to 7 days: refused 401, saying what the app must do (docs/clients.md, "Cutting over
    /// from Google"); a token of ours under a key we hold but with a bad signature stays the plain refusal.
    @Test func aTokenSignedElsewhereIsRefusedWithWhatToDo() async throws {
        try await InProcessService.with { s in
            let created = try await s.createInstallation()
            let now = Int64(Date().timeIntervalSince1970)
            let claims = JSONValue.object([
                ("appId", .string(s.web.id)), ("exp", .int(now + 3600)), ("fid", .string(created.fid)),
                ("projectNumber", .int(s.project.number)), ("iat", .int(now)),
            ]).encoded()
            let google = try JWS.sign(
                header: JSONValue.object([("alg", "ES256"), ("kid", "google-fis-key"), ("typ", "JWT")]).encoded(),
                payload: claims, key: try ES256PrivateKey.generate())
            let consent = "/v1/projects/\(s.project.id)/installations/\(created.fid)/consent"
            let refused = try await s.request("GET", consent, headers: ["x-goog-firebase-installations-auth": google])
            #expect(refused.status == 401)
            #expect(refused.json?["error"]?["message"]?.stringValue?.contains("not issued by this service") == true)
            let ours = try #require(JWS.parse(created.authToken))
            let kid = try #require(try JSONParser.parse(ours.header)["kid"])
            let forged = try JWS.sign(
                header: JSONValue.object([("alg", "ES256"), ("kid", kid), ("typ", "JWT")]).encoded(), payload: claims,
                key: try ES256PrivateKey.generate())
            let bad = try await s.request("GET", consent, headers: ["x-goog-firebase-installations-auth": forged])
            #expect(bad.status == 401)
            #expect(bad.json?["error"]?["message"]?.stringValue == "the installation auth token is invalid or expired")
        }
    }

    @Test func rotatedKeysKeepOldTokensValid() async throws {
        try await InProcessService.with { s in
            let created = try await s.createInstallation()
            let oldKid = try JSONParser.parse(try #require(JWS.parse(created.authToken)).header)["kid"]?.stringValue
            let newKid = try await s.app.tokens.rotate()
            #expect(newKid != oldKid)
            let consent = "/v1/projects/\(s.project.id)/installations/\(created.fid)/consent"
            #expect(
                try await s.request("GET", consent, headers: ["x-goog-firebase-installations-auth": created.authToken])
                    .status == 200)
            let fresh = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(created.fid)/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(created.refreshToken)"])
            let token = try #require(fresh.json?["token"]?.stringValue)
            #expect(try JSONParser.parse(try #require(JWS.parse(token)).header)["kid"]?.stringValue == newKid)
            let jwks = try #require(try await s.request("GET", "/.well-known/jwks.json").json)
            #expect(jwks["keys"]?.arrayValue?.count == 2)
        }
    }

    @Test func lastSeenIsNotWrittenOnEveryRequest() async throws {
        try await InProcessService.with { s in
            let created = try await s.createInstallation()
            let before = try await s.app.installations.find(project: s.project, fid: created.fid)
            for _ in 0..<3 {
                _ = try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/installations/\(created.fid)/authTokens:generate",
                    headers: ["Authorization": "FIS_v2 \(created.refreshToken)"])
            }
            let after = try await s.app.installations.find(project: s.project, fid: created.fid)
            #expect(before?.lastSeenAt == after?.lastSeenAt)
        }
    }

    /// Every SDK sends `{"installation":{"sdkVersion"}}` with each token refresh: an app update's new SDK is recorded.
    @Test func aTokenRefreshRecordsTheSDKsNewVersion() async throws {
        try await InProcessService.with { s in
            let created = try await s.createInstallation()
            let reply = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(created.fid)/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(created.refreshToken)"],
                json: ["installation": ["sdkVersion": "w:0.7.0", "appId": .string(s.web.id)]])
            #expect(reply.status == 200, "\(reply)")
            let after = try #require(try await s.app.installations.find(project: s.project, fid: created.fid))
            #expect(after.sdkVersion == "w:0.7.0")
        }
    }

    @Test func lastSeenIsWrittenOnceItIsAnHourOld() async throws {
        let clock = ManualClock(Date())
        try await InProcessService.with(clock: clock) { s in
            let created = try await s.createInstallation()
            clock.advance(by: 2 * 3600)
            _ = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(created.fid)/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(created.refreshToken)"])
            let after = try #require(try await s.app.installations.find(project: s.project, fid: created.fid))
            #expect(abs(after.lastSeenAt.timeIntervalSince(clock.now())) < 1)
        }
    }
}
