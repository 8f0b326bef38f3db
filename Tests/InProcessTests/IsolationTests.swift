import JSON
import Testing
import TokenRegistryTesting

/// Nothing of project A is reachable with credentials of project B, on any route.
@Suite("Cross-project isolation")
struct IsolationTests {
    @Test func credentialsOfAnotherProjectAreRefusedEverywhere() async throws {
        try await InProcessService.with { s in
            let a = try await s.createInstallation()
            let b = try await s.addProject(id: "project-b", number: 424_242)
            let bInstall = try await s.request(
                "POST", "/v1/projects/project-b/installations", headers: ["x-goog-api-key": b.app.apiKey],
                json: ["appId": .string(b.app.id)])
            let bToken = try #require(bInstall.json?["authToken"]?["token"]?.stringValue)
            let bRefresh = try #require(bInstall.json?["refreshToken"]?.stringValue)
            let pa = "/v1/projects/\(s.project.id)"
            let cases: [(String, String, [String: String], JSONValue?)] = [
                ("POST", "\(pa)/installations", ["x-goog-api-key": b.app.apiKey], ["appId": .string(s.web.id)]),
                ("POST", "\(pa)/installations", ["x-goog-api-key": s.web.apiKey], ["appId": .string(b.app.id)]),
                (
                    "POST", "\(pa)/installations/\(a.fid)/authTokens:generate", ["Authorization": "FIS_v2 \(bRefresh)"],
                    nil
                ),
                ("DELETE", "\(pa)/installations/\(a.fid)", ["Authorization": "FIS_v2 \(bRefresh)"], nil),
                ("DELETE", "\(pa)/installations/\(a.fid)", ["Authorization": "Bearer \(b.serverKey)"], nil),
                (
                    "DELETE", "/v1/project/\(s.project.id)/instanceId/\(a.fid)",
                    ["Authorization": "Bearer \(b.serverKey)"], nil
                ),
                ("GET", "\(pa)/installations/\(a.fid)/consent", ["Authorization": "Bearer \(b.serverKey)"], nil),
                ("GET", "\(pa)/installations/\(a.fid)/consent", ["x-goog-firebase-installations-auth": bToken], nil),
                (
                    "PUT", "\(pa)/installations/\(a.fid)/consent", ["Authorization": "Bearer \(b.serverKey)"],
                    ["autoInitEnabled": false]
                ),
                (
                    "PUT", "\(pa)/installations/\(a.fid)/consent", ["x-goog-firebase-installations-auth": bToken],
                    ["autoInitEnabled": false]
                ),
            ]
            for (method, path, headers, body) in cases {
                let reply =
                    body.map { _ in () } != nil
                    ? try await s.request(method, path, headers: headers, json: body!)
                    : try await s.request(method, path, headers: headers)
                #expect(
                    [401, 403, 404].contains(reply.status), "\(method) \(path) with \(headers.keys.sorted()) → \(reply)"
                )
                #expect(reply.errorCode.map(Int.init) == reply.status)
            }
            // A's installation is untouched.
            let still = try await s.request(
                "POST", "\(pa)/installations/\(a.fid)/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(a.refreshToken)"])
            #expect(still.status == 200)
        }
    }
}
