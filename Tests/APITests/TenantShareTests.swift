import Foundation
import JSON
import Postgres
import Registry
import Testing
import TokenRegistryTesting

/// Class 27 (docs/security.md): a project's requests queued on its own row locks hold that project's share of the
/// pool, never the whole pool. Forced: a second session holds a row every one of project A's requests locks, twelve
/// of them wait for it; project B's requests, which need connections of their own (a topic batch is a transaction),
/// are answered at once. Before the share, A's requests took all eight connections and B's waited for the acquire
/// time-out (503).
@Suite("Project share of the pool", .enabled(if: TestDatabase.isAvailable))
struct TenantShareTests {
    /// `count` installations of `project` with a registration each (reported by the project's server).
    static func registered(_ s: TestService, project: Project, app: App, key: String, count: Int) async throws
        -> [String]
    {
        var tokens: [String] = []
        for n in 0..<count {
            let i = try await s.createInstallation(project: project, app: app)
            let token = "share-\(n)-\(i.fid)"
            let r = try await s.request(
                "PUT", "/v1/projects/\(project.id)/installations/\(i.fid)/registration",
                headers: ["Authorization": "Bearer \(key)"], json: ["token": .string(token), "platform": "android"])
            try #require(r.status == 200, "\(r)")
            tokens.append(token)
        }
        return tokens
    }

    static func batchAdd(_ s: TestService, key: String, tokens: [String], topic: String) async throws -> Reply {
        try await s.request(
            "POST", "/iid/v1:batchAdd", headers: ["Authorization": "Bearer \(key)"],
            json: ["to": .string("/topics/\(topic)"), "registration_tokens": .array(tokens.map { .string($0) })])
    }

    @Test func aProjectQueuedOnItsOwnLockHoldsItsShareAndAnotherIsServed() async throws {
        try await TestService.with(configure: {
            $0.databasePoolSize = 8  // a share of 2
            $0.databaseAcquireTimeoutMillis = 3000
        }) { s in
            let a = try await Self.registered(s, project: s.project, app: s.web, key: s.serverKey, count: 2)
            let other = try await s.addProject(id: "other-proj", number: 222_333_444_555)
            let b = try await Self.registered(s, project: other.project, app: other.app, key: other.serverKey, count: 2)
            let fid = try #require(a.first?.split(separator: "-").dropFirst(2).joined(separator: "-"))
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query("SELECT 1 FROM installations WHERE fid = \(fid) FOR UPDATE")
            let queued = (0..<12).map { _ in Task { try await Self.batchAdd(s, key: s.serverKey, tokens: a, topic: "a") } }
            try await session.waitUntilBlocked(2)
            let started = ContinuousClock.now
            try await withThrowingTaskGroup(of: Reply.self) { group in
                for n in 0..<6 {
                    group.addTask { try await Self.batchAdd(s, key: other.serverKey, tokens: b, topic: "b\(n)") }
                }
                for try await reply in group {
                    #expect(reply.status == 200, "\(reply)")
                    #expect(reply.json?["results"] == [[:], [:]])
                }
            }
            let took = ContinuousClock.now - started
            #expect(took < .seconds(2), "project B's batches took \(took) behind project A's locks")
            // A holds its share and no more: two of its requests wait on the lock, the rest wait for A's connections.
            #expect(try await session.blocked() == 2)
            try await session.execute("COMMIT")
            var answered = 0
            for request in queued {
                let reply = try await request.value
                #expect(reply.status == 200 || reply.status == 503, "\(reply)")
                if reply.status == 200 { answered += 1 }
            }
            #expect(answered >= 2)
            let subscribed = try await s.pool.query(
                "SELECT count(*)::int AS n FROM topic_subscriptions WHERE project_id = 'other-proj'")
            #expect(try subscribed.first?.require("n", as: Int.self) == 12)
        }
    }
}
