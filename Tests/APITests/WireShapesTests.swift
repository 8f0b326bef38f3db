import Foundation
import HTTP
import JSON
import Testing
import TokenRegistryTesting

/// What only the wire shows: bodies as the clients encode them (gzip), decoded by the HTTP layer before any route.
@Suite("Wire shapes", .enabled(if: TestDatabase.isAvailable))
struct WireShapesTests {
    @Test func androidShapedCreateIsGzipped() async throws {
        try await TestService.with { s in
            let body: JSONValue = [
                "fid": "cXyZ0123456789abcdefgh", "appId": .string(s.android.id), "authVersion": "FIS_v2",
                "sdkVersion": "a:19.1.3",
            ]
            let reply = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations",
                headers: [
                    "x-goog-api-key": s.android.apiKey, "Content-Type": "application/json",
                    "Content-Encoding": "gzip", "Cache-Control": "no-cache",
                    "X-Android-Package": "com.example.app", "X-Android-Cert": "AB12CD",
                ],
                body: Gzip.compress(body.encoded()))
            #expect(reply.status == 200, "\(reply)")
            let created = (fid: try #require(reply.json?["fid"]?.stringValue), refresh: try #require(reply.json?["refreshToken"]?.stringValue))
            #expect(created.fid == "cXyZ0123456789abcdefgh")
            let generated = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(created.fid)/authTokens:generate",
                headers: [
                    "Authorization": "FIS_v2 \(created.refresh)", "x-goog-api-key": s.android.apiKey,
                    "Content-Encoding": "gzip",
                ],
                body: Gzip.compress(Array(#"{"installation":{"sdkVersion":"a:19.1.3"}}"#.utf8)))
            #expect(generated.status == 200, "\(generated)")
        }
    }
}
