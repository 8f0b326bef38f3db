import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// Topics through both generations of the admin API, the client verbs, and targeting.
@Suite("Topics and targeting, on the wire", .enabled(if: TestDatabase.isAvailable))
struct TopicsTestsLive {
    @Test func twoThousandTopicLimit() async throws {
        try await TestService.with { s in
            let (fid, token) = try await s.registered(count: 1)[0]
            try await s.pool.query(
                """
                INSERT INTO topic_subscriptions (project_id, fid, topic, created_at)
                SELECT \(s.project.id), \(fid), 'filler-' || n, now() FROM generate_series(1, 1999) AS n
                """)
            #expect(
                try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/registrations/\(fid)/topicSubscriptions?topicName=last",
                    headers: s.serverHeaders, json: [:]
                ).status == 200)
            let over = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/registrations/\(fid)/topicSubscriptions?topicName=over",
                headers: s.serverHeaders, json: [:])
            #expect(over.status == 400)
            #expect(over.json?["error"]?["details"]?.arrayValue?.first?["errorCode"]?.stringValue == "TOO_MANY_TOPICS")
            let iid = try await s.request(
                "POST", "/iid/v1:batchAdd", headers: s.serverHeaders,
                json: ["to": "/topics/over", "registration_tokens": [.string(token)]])
            #expect(iid.json?["results"] == [["error": "TOO_MANY_TOPICS"]])
        }
    }
}
