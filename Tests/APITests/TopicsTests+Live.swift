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

    /// A registration's delete ends its topics, as a token's do at FCM: after a logout's `deleteToken()` (the JS
    /// SDK's DELETE, iOS's `/register` delete) the installation's next token starts with none, and no topic reaches
    /// it. (They stayed on the installation, and the new token inherited the last user's topics.) By the client and
    /// by the app's backend.
    @Test func aDeletedRegistrationsTopicsGoWithIt() async throws {
        try await TestService.with { s in
            let base = "/v1/projects/\(s.project.id)"
            for byServer in [false, true] {
                let i = try await s.createInstallation()
                let fis = ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"]
                let created = try await s.request("POST", "\(base)/registrations", headers: fis, json: Bodies.webRegistration)
                let token = try #require(created.json?["token"]?.stringValue, "\(created)")
                for topic in ["user_123", "news"] {
                    let r = try await s.request(
                        "POST", "\(base)/registrations/\(i.fid)/topicSubscriptions?topicName=\(topic)",
                        headers: s.serverHeaders, json: [:])
                    #expect(r.status == 200, "\(r)")
                }
                let deleted = try await s.request(
                    "DELETE", "\(base)/registrations/\(token)", headers: byServer ? s.serverHeaders : fis)
                #expect(deleted.status == 200, "\(deleted)")
                let again = try await s.request("POST", "\(base)/registrations", headers: fis, json: Bodies.webRegistration)
                #expect(again.status == 200, "\(again)")
                let topics = try await s.request(
                    "GET", "\(base)/registrations/\(i.fid)/topicSubscriptions", headers: s.serverHeaders)
                #expect(topics.status == 200 && topics.json?["topicSubscriptions"]?.arrayValue?.isEmpty == true, "\(topics)")
                let members = try await s.request(
                    "GET", "\(base)/topics/user_123/registrations", headers: s.serverHeaders)
                #expect(members.json?["registrations"]?.arrayValue?.isEmpty == true, "\(members)")
            }
        }
    }

    /// The client's clean-up after its installation was deleted on the server (an erasure, the app's backend, its
    /// expiry): the auth token it still holds is valid, its registration went with the installation, and the delete
    /// answers `{}` so the JS SDK's `deleteToken()` clears its own state (it stopped at the 401). A token that does not
    /// verify is still refused.
    @Test func aRegistrationsDeleteWithTheTokenOfADeletedInstallationFindsNothingLeft() async throws {
        try await TestService.with { s in
            let base = "/v1/projects/\(s.project.id)"
            let i = try await s.createInstallation()
            let fis = ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"]
            let created = try await s.request("POST", "\(base)/registrations", headers: fis, json: Bodies.webRegistration)
            let token = try #require(created.json?["token"]?.stringValue, "\(created)")
            let gone = try await s.request(
                "DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)", headers: s.serverHeaders)
            #expect(gone.status == 200, "\(gone)")
            let cleanUp = try await s.request("DELETE", "\(base)/registrations/\(token)", headers: fis)
            #expect(cleanUp.status == 200 && cleanUp.json == [:], "\(cleanUp)")
            // Every other call with that token is refused as before.
            let other = try await s.request("POST", "\(base)/registrations", headers: fis, json: Bodies.webRegistration)
            #expect(other.status == 401, "\(other)")
            let forged = try await s.request(
                "DELETE", "\(base)/registrations/\(token)",
                headers: ["x-goog-firebase-installations-auth": "FIS \(i.authToken.dropLast(4))AAAA"])
            #expect(forged.status == 401, "\(forged)")
        }
    }

    /// iOS builds a topic operation's path from the FID it read before the token refresh that found its installation
    /// deleted and made a new one: a path FID that no installation has any more is the token's installation. One that
    /// names another live installation is still refused.
    @Test func aClientTopicVerbWhosePathNamesARotatedFIDActsForTheToken() async throws {
        try await TestService.with { s in
            let base = "/v1/projects/\(s.project.id)"
            let old = try await s.createInstallation(app: s.ios)
            let other = try await s.createInstallation(app: s.ios)
            let gone = try await s.request(
                "DELETE", "/v1/project/\(s.project.id)/instanceId/\(old.fid)", headers: s.serverHeaders)
            #expect(gone.status == 200, "\(gone)")
            let fresh = try await s.createInstallation(app: s.ios)
            let fis = ["x-goog-firebase-installations-auth": "FIS \(fresh.authToken)", "x-goog-api-key": s.ios.apiKey]
            let rotated = try await s.request(
                "POST", "\(base)/registrations/\(old.fid)/topicSubscriptions/news:subscribe", headers: fis, json: [:])
            #expect(rotated.status == 200, "\(rotated)")
            let topics = try await s.request(
                "GET", "\(base)/registrations/\(fresh.fid)/topicSubscriptions", headers: s.serverHeaders)
            #expect(topics.json?["topicSubscriptions"]?.arrayValue?.count == 1, "\(topics)")
            let foreign = try await s.request(
                "POST", "\(base)/registrations/\(other.fid)/topicSubscriptions/news:subscribe", headers: fis, json: [:])
            #expect(foreign.status == 403, "\(foreign)")
        }
    }
}
