import Foundation
import HTTP
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// What real clients need beyond the happy path: browsers' CORS, Android's gzip DELETE, FIDs where tokens are
/// expected, configuration errors that must not cost a device its FID, existing Firebase identities.
@Suite("Client compatibility")
struct ClientCompatibilityTests {
    static let page = "http://127.0.0.1:5173"

    static func preflight(_ method: String) -> [String: String] {
        [
            "Origin": page, "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "content-type,x-goog-api-key,x-firebase-client",
        ]
    }

    @Test func browserRoutesAnswerPreflightsAndServerRoutesDoNot() async throws {
        try await InProcessService.with { s in
            let create = try await s.request(
                "OPTIONS", "/v1/projects/\(s.project.id)/installations", headers: Self.preflight("POST"))
            #expect(create.status == 204, "\(create)")
            #expect(create.header("access-control-allow-origin") == Self.page)
            let allowed = create.header("access-control-allow-headers") ?? ""
            for header in ["content-type", "x-goog-api-key", "x-firebase-client", "x-goog-firebase-installations-auth"]
            {
                #expect(allowed.contains(header))
            }
            #expect(create.header("access-control-max-age") == "3600")
            let verbs = try await s.request(
                "OPTIONS",
                "/v1/projects/\(s.project.id)/registrations/fAAAAAAAAAAAAAAAAAAAAA/topicSubscriptions/news:subscribe",
                headers: Self.preflight("POST"))
            #expect(verbs.status == 204)
            // Server-key routes, and a HEAD of a browser GET route (the router answers it with the GET's handler):
            // no cross-origin access, preflight or not.
            let consent = "/v1/projects/\(s.project.id)/installations/fAAAAAAAAAAAAAAAAAAAAA/consent"
            #expect(try await s.request("OPTIONS", consent, headers: Self.preflight("GET")).status == 204)
            for (method, path) in [
                ("HEAD", consent),
                ("POST", "/v1/projects/\(s.project.id)/linkedServices"),
                ("PUT", "/v1/projects/\(s.project.id)/installations/fAAAAAAAAAAAAAAAAAAAAA/registration"),
                ("GET", "/v1/projects/\(s.project.id)/topics/news/registrations"),
            ] {
                let refused = try await s.request("OPTIONS", path, headers: Self.preflight(method))
                #expect(refused.status == 405 && refused.header("access-control-allow-origin") == nil, "\(path)")
            }
            // The real call carries the origin back, unless it is made with a server key.
            let i = try await s.createInstallation()
            let created = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations",
                headers: ["Origin": Self.page, "x-goog-api-key": s.web.apiKey],
                json: ["fid": "", "authVersion": "FIS_v2", "appId": .string(s.web.id), "sdkVersion": "w:0.6.24"])
            #expect(created.status == 200 && created.header("access-control-allow-origin") == Self.page)
            let error = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations",
                headers: ["Origin": Self.page, "x-goog-api-key": s.web.apiKey], json: ["appId": 5])
            #expect(error.status == 400 && error.header("access-control-allow-origin") == Self.page)
            let withServerKey = try await s.request(
                "DELETE", "/v1/projects/\(s.project.id)/registrations/\(i.fid)",
                headers: s.serverHeaders.merging(["Origin": Self.page]) { $1 })
            #expect(withServerKey.header("access-control-allow-origin") == nil)
        }
    }

    @Test func originsArePerApp() async throws {
        try await InProcessService.with { s in
            let restricted = try await s.app.catalog.createApp(
                project: s.project, platform: .web, bundleID: nil, autoInitDefault: true,
                webOrigins: ["https://shop.example"])
            func create(_ origin: String) async throws -> Reply {
                try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/installations",
                    headers: ["Origin": origin, "x-goog-api-key": restricted.apiKey],
                    json: ["fid": "", "authVersion": "FIS_v2", "appId": .string(restricted.id)])
            }
            #expect(
                try await create("https://shop.example").header("access-control-allow-origin") == "https://shop.example"
            )
            #expect(try await create("https://evil.example").header("access-control-allow-origin") == nil)
            await #expect(throws: RegistryError.self) {
                _ = try await s.app.catalog.createApp(
                    project: s.project, platform: .web, bundleID: nil, autoInitDefault: true,
                    webOrigins: ["https://shop.example/path"])
            }
        }
    }

    /// A page on another origin cannot act for a restricted web app through a key of an app without a list (an iOS
    /// or Android key ships in every bundle): the key must be the created app's, and every app a later call names
    /// (its key's, its installation's) must allow the origin.
    @Test func anotherAppsKeyOpensNoRestrictedApp() async throws {
        try await InProcessService.with { s in
            let restricted = try await s.app.catalog.createApp(
                project: s.project, platform: .web, bundleID: nil, autoInitDefault: true,
                webOrigins: ["https://shop.example"])
            let evil = "https://evil.example"
            let refused = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations",
                headers: ["Origin": evil, "x-goog-api-key": s.android.apiKey],
                json: ["fid": "", "authVersion": "FIS_v2", "appId": .string(restricted.id)])
            #expect(refused.status == 403 && refused.text.contains("appId"), "\(refused)")
            // A native client (no page, no Origin) may use any key of the project, as Google lets it.
            let native = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations", headers: ["x-goog-api-key": s.android.apiKey],
                json: ["fid": "", "authVersion": "FIS_v2", "appId": .string(restricted.id)])
            #expect(native.status == 200, "\(native)")
            // An installation of the restricted app, made from its own origin.
            let i = try await s.createInstallation(app: restricted)
            let asInstallation: [String: String] = [
                "Origin": evil, "x-goog-api-key": s.android.apiKey, "x-goog-firebase-installations-auth": i.authToken,
            ]
            let generate = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(i.fid)/authTokens:generate",
                headers: ["Origin": evil, "x-goog-api-key": s.android.apiKey, "Authorization": "FIS_v2 \(i.refreshToken)"],
                json: ["installation": ["sdkVersion": "w:0.6.24"]])
            #expect(generate.status == 200 && generate.header("access-control-allow-origin") == nil, "\(generate)")
            let register = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/registrations", headers: asInstallation,
                json: ["web": ["endpoint": "https://push.example/x", "auth": "YXV0aA", "p256dh": "cDI1NmRo"]])
            #expect(register.header("access-control-allow-origin") == nil, "\(register)")
            // From the app's own origin, the same calls are readable.
            let own = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(i.fid)/authTokens:generate",
                headers: [
                    "Origin": "https://shop.example", "x-goog-api-key": restricted.apiKey,
                    "Authorization": "FIS_v2 \(i.refreshToken)",
                ])
            #expect(own.status == 200 && own.header("access-control-allow-origin") == "https://shop.example")
        }
    }

    @Test func androidDeletesWithAnEmptyGzipBody() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation(app: s.android)
            let reply = try await s.request(
                "DELETE", "/v1/projects/\(s.project.id)/installations/\(i.fid)",
                headers: [
                    "Authorization": "FIS_v2 \(i.refreshToken)", "x-goog-api-key": s.android.apiKey,
                    "Content-Encoding": "gzip", "Content-Type": "application/json", "Cache-Control": "no-cache",
                ], body: [])
            #expect(reply.status == 200, "\(reply)")
        }
    }

    @Test func fidsAreAcceptedWhereTokensAre() async throws {
        try await InProcessService.with { s in
            let withToken = try await s.createInstallation()
            _ = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(withToken.fid)/registration",
                headers: s.serverHeaders, json: ["token": "tok-fid-test", "platform": "android"])
            let fidOnly = try await s.createInstallation()
            let add = try await s.request(
                "POST", "/iid/v1:batchAdd", headers: s.serverHeaders,
                json: [
                    "to": "/topics/fids",
                    "registration_tokens": [.string(fidOnly.fid), "tok-fid-test", "fAAAAAAAAAAAAAAAAAAAAA"],
                ])
            #expect(
                add.json?["results"]?.arrayValue?.map { $0["error"]?.stringValue } == [nil, nil, "NOT_FOUND"], "\(add)")
            let info = try await s.request("GET", "/iid/info/\(fidOnly.fid)?details=true", headers: s.serverHeaders)
            #expect(info.status == 200 && info.json?["rel"]?["topics"]?["fids"] != nil, "\(info)")
            #expect(info.json?["platform"]?.stringValue == "CHROME")
            let rel = try await s.request(
                "POST", "/iid/v1/\(fidOnly.fid)/rel/topics/other", headers: s.serverHeaders)
            #expect(rel.status == 200)
            let remove = try await s.request(
                "POST", "/iid/v1:batchRemove", headers: s.serverHeaders,
                json: ["to": "/topics/fids", "registration_tokens": [.string(fidOnly.fid)]])
            #expect(remove.json?["results"]?.arrayValue?.first?["error"] == nil)
        }
    }

    @Test func configurationErrorsAnswer403NotTheFIDIsGone() async throws {
        try await InProcessService.with { s in
            let other = try await s.addProject(id: "other-proj", number: 99_999)
            let i = try await s.createInstallation()
            let unknownProject = try await s.request(
                "POST", "/v1/projects/no-such-project/installations/\(i.fid)/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(i.refreshToken)", "x-goog-api-key": s.web.apiKey])
            #expect(unknownProject.status == 403 && unknownProject.errorStatus == "PERMISSION_DENIED")
            let foreignKey = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(i.fid)/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(i.refreshToken)", "x-goog-api-key": other.app.apiKey])
            #expect(foreignKey.status == 403 && foreignKey.errorStatus == "PERMISSION_DENIED")
            // The FID itself is fine: a correct call still works.
            let ok = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(i.fid)/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(i.refreshToken)", "x-goog-api-key": s.web.apiKey])
            #expect(ok.status == 200)
        }
    }

    @Test func appsKeepTheirExistingFirebaseIdentities() async throws {
        try await InProcessService.with { s in
            let appID = "1:\(s.project.number):ios:0123456789abcdef"
            let apiKey = "AIzaSyExistingFirebaseKey-0123456789abc"
            let app = try await s.app.catalog.createApp(
                project: s.project, platform: .ios, bundleID: "com.example.existing", autoInitDefault: true,
                appID: appID, apiKey: apiKey)
            #expect(app.id == appID && app.apiKey == apiKey)
            let created = try await s.createInstallation(app: app)
            #expect(Identifiers.isValidFID(created.fid))
            for (id, key, field) in [
                ("1:999:ios:0123456789abcdef", nil as String?, "app-id"),
                ("1:\(s.project.number):web:0123456789abcdef", nil, "app-id"),
                (nil as String?, "not-a-key", "api-key"),
            ] {
                do {
                    _ = try await s.app.catalog.createApp(
                        project: s.project, platform: .ios, bundleID: nil, autoInitDefault: true, appID: id, apiKey: key
                    )
                    Issue.record("accepted \(field)")
                } catch let error as RegistryError {
                    #expect(error.field == field)
                }
            }
            // A second app of the project may hold the key (Firebase's keys are one a platform); an app ID is one
            // app's, and a key is one project's.
            let debug = try await s.app.catalog.createApp(
                project: s.project, platform: .ios, bundleID: "com.example.existing.debug", autoInitDefault: true,
                apiKey: apiKey)
            #expect(debug.apiKey == apiKey && debug.id != appID)
            await #expect(throws: RegistryError.self) {
                _ = try await s.app.catalog.createApp(
                    project: s.project, platform: .ios, bundleID: nil, autoInitDefault: true, appID: appID)
            }
            _ = try await s.app.catalog.createProject(id: "another-project", number: 77_777)
            let another = try #require(try await s.app.catalog.project("another-project"))
            do {
                _ = try await s.app.catalog.createApp(
                    project: another, platform: .ios, bundleID: nil, autoInitDefault: true, apiKey: apiKey)
                Issue.record("another project took the key")
            } catch let error as RegistryError {
                #expect(error.kind == .alreadyExists && error.message == Catalog.keyOfAnotherProject)
            }
        }
    }

    /// Two apps that ship one API key (a `google-services.json` with a release and a debug app): each creates its
    /// installations with the key, for the app its body names; a page may call from an origin any of them allows, and
    /// an app of the key without a list opens it to no other origin.
    @Test func appsThatShareAnAPIKey() async throws {
        try await InProcessService.with { s in
            let key = "AIzaSySharedFirebaseKey-0123456789abcde"
            let release = try await s.app.catalog.createApp(
                project: s.project, platform: .web, bundleID: nil, autoInitDefault: true, apiKey: key,
                webOrigins: ["https://app.example"])
            let debug = try await s.app.catalog.createApp(
                project: s.project, platform: .web, bundleID: nil, autoInitDefault: true, apiKey: key,
                webOrigins: ["http://localhost:5173"])
            for app in [release, debug] {
                let created = try await s.createInstallation(app: app)
                let installation = try #require(try await s.app.installations.find(project: s.project, fid: created.fid))
                #expect(installation.appID == app.id)
            }
            // A third app of the key with no list of its own does not open the key to every origin.
            _ = try await s.app.catalog.createApp(
                project: s.project, platform: .web, bundleID: nil, autoInitDefault: true, apiKey: key)
            for (origin, allowed) in [
                ("https://app.example", true), ("http://localhost:5173", true), ("https://evil.example", false),
            ] {
                let response = try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/installations",
                    headers: ["x-goog-api-key": key, "Origin": origin],
                    json: ["fid": "", "authVersion": "FIS_v2", "appId": .string(debug.id), "sdkVersion": "w:0.6.24"])
                #expect(response.status == 200)
                #expect((response.header("access-control-allow-origin") == origin) == allowed, "\(origin)")
                // The installation's later calls are judged by the same apps: a site deployed with the other app's
                // config goes on refreshing what it created.
                let json = try #require(response.json)
                let fid = try #require(json["fid"]?.stringValue)
                let refresh = try #require(json["refreshToken"]?.stringValue)
                let generate = try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/installations/\(fid)/authTokens:generate",
                    headers: ["x-goog-api-key": key, "Origin": origin, "Authorization": "FIS_v2 \(refresh)"])
                #expect(generate.status == 200)
                #expect((generate.header("access-control-allow-origin") == origin) == allowed, "\(origin)")
            }
        }
    }
}
