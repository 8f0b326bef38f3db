import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// The people routes' wire rules: the cap over HTTP, users as targets (alone, with a condition, bounded), user IDs the
/// paths could not name, an unbound installation's binding, and an erasure of a person the registry holds nothing of.
@Suite("People routes, in process")
struct PeopleRouteTests {
    @Test func theCapAnswersResourceExhaustedOrDisplacesTheLeastRecentlySeen() async throws {
        try await InProcessService.with(configure: { $0.userPolicy.maxInstallationsPerUser = 1 }) { s in
            let base = "/v1/projects/\(s.project.id)"
            let first = try await s.createInstallation()
            let second = try await s.createInstallation()
            #expect(
                try await s.request(
                    "PUT", "\(base)/installations/\(first.fid)/user", headers: s.serverHeaders, json: ["userId": "u"]
                ).status == 200)
            let refused = try await s.request(
                "PUT", "\(base)/installations/\(second.fid)/user", headers: s.serverHeaders, json: ["userId": "u"])
            #expect(refused.status == 429 && refused.json?["error"]?["status"]?.stringValue == "RESOURCE_EXHAUSTED")
            #expect(refused.json?["error"]?["message"]?.stringValue?.hasPrefix("userId:") == true)
        }
        try await InProcessService.with(configure: {
            $0.userPolicy.maxInstallationsPerUser = 1
            $0.userPolicy.overflow = .unbindLeastRecentlySeen
        }) { s in
            let base = "/v1/projects/\(s.project.id)"
            let first = try await s.createInstallation()
            let second = try await s.createInstallation()
            _ = try await s.request(
                "PUT", "\(base)/installations/\(first.fid)/user", headers: s.serverHeaders, json: ["userId": "u"])
            let moved = try await s.request(
                "PUT", "\(base)/installations/\(second.fid)/user", headers: s.serverHeaders, json: ["userId": "u"])
            #expect(moved.status == 200 && moved.json?["displaced"] == [.string(first.fid)], "\(moved.text)")
            let unbound = try await s.request("GET", "\(base)/installations/\(first.fid)/user", headers: s.serverHeaders)
            #expect(unbound.status == 200 && unbound.json?["userId"] == .null)
        }
    }

    @Test func usersAreTargetsAloneOrWithAConditionAndBounded() async throws {
        try await InProcessService.with { s in
            let base = "/v1/projects/\(s.project.id)"
            var fids: [String] = []
            for (n, user) in ["ann", "ann", "ben"].enumerated() {
                let i = try await s.createInstallation()
                fids.append(i.fid)
                _ = try await s.request(
                    "PUT", "\(base)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                    json: ["token": .string("\(i.fid):t\(n)"), "platform": "android"])
                _ = try await s.request(
                    "PUT", "\(base)/installations/\(i.fid)/user", headers: s.serverHeaders, json: ["userId": .string(user)])
            }
            _ = try await s.request(
                "POST", "\(base)/registrations/\(fids[1])/topicSubscriptions?topicName=news", headers: s.serverHeaders,
                json: [:])
            func resolve(_ body: JSONValue) async throws -> (Int, Set<String>) {
                let reply = try await s.request("POST", "\(base)/targets:resolve", headers: s.serverHeaders, json: body)
                let fids = Set((reply.json?["registrations"]?.arrayValue ?? []).compactMap { $0["fid"]?.stringValue })
                return (reply.status, fids)
            }
            #expect(try await resolve(["users": ["ann"]]) == (200, [fids[0], fids[1]]))
            #expect(try await resolve(["users": ["ann", "ben", "nobody"]]) == (200, Set(fids)))
            #expect(try await resolve(["users": ["ann"], "condition": "'news' in topics"]) == (200, [fids[1]]))
            // Consent rules hold for people as for topics.
            _ = try await s.request(
                "PUT", "\(base)/installations/\(fids[0])/consent", headers: s.serverHeaders,
                json: ["autoInitEnabled": false])
            #expect(try await resolve(["users": ["ann"]]) == (200, [fids[1]]))
            for (body, field) in [
                (["users": .array((0...1000).map { .string("u\($0)") })] as JSONValue, "users"),
                (["users": []], "users"), (["users": [1]], "users[0]"), (["users": ["ok", ""]], "users[1]"),
                (["users": "ann"], "users"), ([:], "condition"),
            ] {
                let reply = try await s.request("POST", "\(base)/targets:resolve", headers: s.serverHeaders, json: body)
                #expect(reply.status == 400, "\(body.text)")
                #expect(reply.json?["error"]?["message"]?.stringValue?.hasPrefix(field) == true, "\(reply.text)")
            }
        }
    }

    @Test func userIDsThePathsCouldNotNameAreRefused() async throws {
        try await InProcessService.with { s in
            let base = "/v1/projects/\(s.project.id)"
            let i = try await s.createInstallation()
            for bad in ["", String(repeating: "é", count: 129), "tab\there", "a:export", "b:erase"] {
                let reply = try await s.request(
                    "PUT", "\(base)/installations/\(i.fid)/user", headers: s.serverHeaders, json: ["userId": .string(bad)])
                #expect(reply.status == 400, "\(bad): \(reply.text)")
                #expect(reply.json?["error"]?["message"]?.stringValue?.hasPrefix("userId") == true)
            }
            // Colons and slashes elsewhere are fine (auth0|123, google:456), percent-encoded in paths.
            for good in ["auth0|123", "google:456", "a/b", "100%"] {
                #expect(
                    try await s.request(
                        "PUT", "\(base)/installations/\(i.fid)/user", headers: s.serverHeaders,
                        json: ["userId": .string(good)]
                    ).status == 200)
                let encoded = good.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                let user = try await s.request("GET", "\(base)/users/\(encoded)", headers: s.serverHeaders)
                #expect(user.json?["installations"]?.arrayValue?.first?["fid"]?.stringValue == i.fid, "\(good)")
            }
        }
    }

    /// Spellings of one person's ID: the first the erasure's path uses, the second the export's (composed and
    /// decomposed forms of the same name, Unicode-equal but not byte-equal).
    static let spellings: [(String, String)] = [
        ("ghost@example.org", "ghost@example.org"),
        ("Jos\u{E9}", "Jose\u{301}"),
        ("Jose\u{301}", "Jos\u{E9}"),
        ("\u{1E9B}\u{323}-\u{212B}ngstr\u{F6}m", "\u{17F}\u{323}\u{307}-A\u{30A}ngstro\u{308}m"),
        ("\u{AC00}\u{B098}", "\u{1100}\u{1161}\u{1102}\u{1161}"),
    ]

    /// A person the registry holds nothing of: the erasure is done at once with no installation, and once the purge
    /// ran, the audit log keeps only the keyed hash of the person's ID, the entries written afterwards included,
    /// whichever spelling of the name each path used.
    @Test(arguments: spellings)
    func anErasureOfAPersonWithNothingLeavesOnlyTheHash(_ spelling: (erase: String, export: String)) async throws {
        try await InProcessService.with { s in
            let base = "/v1/projects/\(s.project.id)"
            func path(_ name: String) -> String { name.addingPercentEncoding(withAllowedCharacters: .alphanumerics)! }
            let erased = try await s.request(
                "POST", "\(base)/users/\(path(spelling.erase)):erase", headers: s.serverHeaders)
            #expect(erased.status == 200 && erased.json?["state"]?.stringValue == "done", "\(erased)")
            #expect(erased.json?["installations"]?.arrayValue == [])
            _ = try await s.app.jobs.runAll()
            _ = try await s.request("GET", "\(base)/users/\(path(spelling.export)):export", headers: s.serverHeaders)
            _ = try await s.app.jobs.runAll()
            let log = try await s.request("GET", "\(base)/auditLog", headers: s.serverHeaders)
            #expect(log.json?["entries"]?.arrayValue?.count == 2)
            let targets = log.json?["entries"]?.arrayValue?.compactMap { $0["target"]?.stringValue } ?? []
            // Cleared by the purge: no entry names the person, in either spelling.
            #expect(targets.allSatisfy { !$0.hasPrefix("users/") }, "\(log.text)")
            for name in [spelling.erase, spelling.export] {
                #expect(!targets.contains { $0.unicodeScalars.elementsEqual(("users/" + name).unicodeScalars) })
            }
            #expect(try await s.app.services.audit.verify(projectID: s.project.id).intact)
        }
    }
}
