import API
import Foundation
import HTTP
import JSON
import Postgres
import Registry
import Testing
import TokenRegistryTesting

/// The refresh callback appends its audit entry in the statement of its write (``AuditCompanion``): one entry a call,
/// whatever the call answered, with the outcome of its answer; and the write and its entry commit or fail together.
@Suite("An audit entry appended with its write", .enabled(if: TestDatabase.isAvailable))
struct AuditWithWriteTests {
    static func entries(_ s: TestService) async throws -> [AuditEntry] {
        let audit = s.app.services.audit
        try await audit.chain()
        #expect(try await audit.verify(projectID: s.project.id).intact)
        return try await audit.entries(projectID: s.project.id, afterSeq: 0, limit: 10_000)
    }

    @Test func everyCallbackAppendsOneEntryWithTheOutcomeItAnswered() async throws {
        try await TestService.with { s in
            let base = "/v1/projects/\(s.project.id)"
            let i = try await s.createInstallation()
            let withheld = try await s.createInstallation(app: s.consentFirst)
            let soon = Timestamp.rfc3339(Date().addingTimeInterval(3600))
            let long = Timestamp.rfc3339(Date().addingTimeInterval(-86_400))
            // Each outcome of the write, and failures before the write (the route appends those entries itself).
            let calls: [(fid: String, body: JSONValue, status: Int)] = [
                (i.fid, ["token": "tok-a", "platform": "web"], 200),  // written
                (i.fid, ["token": "tok-old", "platform": "web", "clientTime": .string(long)], 200),  // older
                (i.fid, ["token": "tok-b", "platform": "web", "clientTime": .string(soon)], 400),  // ahead
                (withheld.fid, ["token": "tok-c", "platform": "web"], 400),  // consent off
                ("cAAAAAAAAAAAAAAAAAAAAA", ["token": "tok-d", "platform": "web"], 404),  // no installation
                (i.fid, ["token": "tok-e", "platform": "fax"], 400),  // the body, before the write
                (i.fid, ["token": "bad token", "platform": "web"], 400),  // the domain's check, before the write
            ]
            var answered: [String: Int] = [:]
            for call in calls {
                let r = try await s.request(
                    "PUT", "\(base)/installations/\(call.fid)/registration", headers: s.serverHeaders, json: call.body)
                #expect(r.status == call.status, "\(call.body): \(r)")
                answered[try #require(r.raw.header("x-request-id"))] = r.status
            }
            let entries = try await Self.entries(s).filter { $0.action == "registrations.refresh" }
            #expect(entries.count == calls.count, "one entry a call: \(entries.map(\.outcome))")
            for (requestID, status) in answered {
                let mine = entries.filter { $0.requestID == requestID }
                #expect(mine.count == 1, "\(requestID): \(mine.count) entries")
                let expected = status < 400 ? "OK" : CanonicalStatus.code(for: status)
                #expect(mine.first?.outcome == expected, "\(status): \(mine.first?.outcome ?? "none")")
            }
        }
    }

    /// AUDIT_SKIP_ACTIONS leaves the named actions out of the log (in both ways an entry is written: with the write
    /// and by the route), and only those; a name no route records stops the service at start, naming the ones it
    /// could have meant.
    @Test func skippedActionsAppendNoEntry() async throws {
        let configured = try Configuration.fromEnvironment([
            "AUDIT_SKIP_ACTIONS": " registrations.refresh, topics.subscribe ,"
        ])
        #expect(configured.auditSkippedActions == ["registrations.refresh", "topics.subscribe"])
        #expect(throws: ConfigurationError.self) {
            _ = try Configuration.fromEnvironment(["AUDIT_SKIP_ACTIONS": "registrations refresh"])
        }
        try await TestService.with(configure: { $0.auditSkippedActions = ["registrations.refresh"] }) { s in
            let base = "/v1/projects/\(s.project.id)"
            let i = try await s.createInstallation()
            for body: JSONValue in [["token": "tok-a", "platform": "web"], ["token": "tok-e", "platform": "fax"]] {
                _ = try await s.request(
                    "PUT", "\(base)/installations/\(i.fid)/registration", headers: s.serverHeaders, json: body)
            }
            let linked = try await s.request(
                "POST", "\(base)/linkedServices", headers: s.serverHeaders,
                json: ["name": "svc", "endpoint": "https://svc.example/hook"])
            #expect(linked.status == 200, "\(linked)")
            let actions = try await Self.entries(s).map(\.action)
            #expect(!actions.contains("registrations.refresh"))
            #expect(actions.count == 1, "\(actions)")
        }
        await #expect(throws: ConfigurationError.self) {
            try await TestService.with(configure: { $0.auditSkippedActions = ["registrations.refrsh"] }) { _ in }
        }
    }

    /// An entry that cannot be appended (here a trigger refuses it) rolls the write back with it: the token stays what
    /// it was. With the entry in a statement of its own after the write, the token changed and the entry was lost.
    @Test func aWriteWhoseEntryFailsIsRolledBack() async throws {
        try await TestService.with { s in
            let base = "/v1/projects/\(s.project.id)"
            let i = try await s.createInstallation()
            let first = try await s.request(
                "PUT", "\(base)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                json: ["token": "tok-kept", "platform": "web"])
            #expect(first.status == 200, "\(first)")
            let conn = try await SecondSession(conninfo: s.conninfo)
            try await conn.execute(
                """
                CREATE FUNCTION test_refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'audit entries refused for the test'; END $$;
                CREATE TRIGGER test_refuse_audit BEFORE INSERT ON audit_pending
                    FOR EACH ROW EXECUTE FUNCTION test_refuse_audit()
                """)
            let refused = try await s.request(
                "PUT", "\(base)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                json: ["token": "tok-lost", "platform": "web"])
            #expect(refused.status >= 500, "\(refused)")
            try await conn.execute("DROP TRIGGER test_refuse_audit ON audit_pending; DROP FUNCTION test_refuse_audit()")
            let stored = try await s.app.services.registrations.find(project: s.project, tokenOrFID: i.fid)
            #expect(stored?.token == "tok-kept")
            let outcomes = try await Self.entries(s).filter { $0.action == "registrations.refresh" }.map(\.outcome)
            #expect(outcomes == ["OK"])
        }
    }
}
