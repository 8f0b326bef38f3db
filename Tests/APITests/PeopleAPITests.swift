import Foundation
import JSON
import Postgres
import Registry
import Testing
import TokenRegistryTesting

/// Data-subject requests over HTTP on PostgreSQL: a person's erasure through its deadline, the person's lock under
/// racing logins, logouts and erasures, and the audit log's chain against tampering.
@Suite("People and the audit log", .enabled(if: TestDatabase.isAvailable))
struct PeopleAPITests {
    static func link(_ s: TestService, _ receiver: Receiver, name: String) async throws {
        let created = try await s.request(
            "POST", "/v1/projects/\(s.project.id)/linkedServices", headers: s.serverHeaders,
            json: ["name": .string(name), "endpoint": .string(receiver.endpoint)])
        #expect(created.status == 200, "\(created)")
        receiver.setSecret(created.json?["secret"]?.stringValue ?? "")
    }

    static func bind(_ s: TestService, _ fid: String, _ user: String) async throws -> Int {
        try await s.request(
            "PUT", "/v1/projects/\(s.project.id)/installations/\(fid)/user", headers: s.serverHeaders,
            json: ["userId": .string(user)]
        ).status
    }

    /// Every text, array and bytea column of every table that holds `needle`.
    static func holders(of needle: String, in s: TestService) async throws -> [String] {
        let columns = try await s.pool.query(
            """
            SELECT table_name, column_name FROM information_schema.columns
            WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'ARRAY', 'bytea')
            """)
        var holders: [String] = []
        for row in columns {
            let table: String = try row.require("table_name")
            let column: String = try row.require("column_name")
            let hits = try await s.pool.query(
                PostgresQuery(
                    unsafeSQL: "SELECT count(*) AS n FROM \"\(table)\" WHERE position($1 in \"\(column)\"::text) > 0",
                    binds: [needle]))
            if try hits.first?.require("n", as: Int.self) ?? 0 > 0 { holders.append("\(table).\(column)") }
        }
        return holders
    }

    /// A person with three installations and two linked services (one confirms, one never does): the erasure reaches
    /// both for each installation, one receipt shows it, and past the deadline nothing of the person or of any of the
    /// FIDs is left in any column of any table, the audit log's included; the receipt and the chain remain.
    @Test func anErasureReachesEveryServiceAndAfterTheDeadlineNothingOfThePersonRemains() async throws {
        let clock = ManualClock(Date())
        let confirms = try Receiver(statuses: [])
        let neverConfirms = try Receiver(statuses: Array(repeating: 500, count: 2000))
        let person = "person-7@example.org"
        try await TestService.with(clock: clock) { s in
            try await Self.link(s, confirms, name: "crm")
            try await Self.link(s, neverConfirms, name: "mail")
            let base = "/v1/projects/\(s.project.id)"
            var fids: [String] = []
            for n in 0..<3 {
                let i = try await s.createInstallation()
                fids.append(i.fid)
                #expect(try await Self.bind(s, i.fid, person) == 200)
                _ = try await s.request(
                    "PUT", "\(base)/installations/\(i.fid)/consent", headers: s.serverHeaders,
                    json: ["autoInitEnabled": true])
                _ = try await s.request(
                    "PUT", "\(base)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                    json: ["token": .string("\(i.fid):tok\(n)"), "platform": "android"])
                _ = try await s.request(
                    "POST", "\(base)/registrations/\(i.fid)/topicSubscriptions?topicName=news", headers: s.serverHeaders,
                    json: [:])
            }
            // The person is reachable, then exported.
            let targets = try await s.request(
                "POST", "\(base)/targets:resolve", headers: s.serverHeaders, json: ["users": [.string(person)]])
            #expect(targets.json?["registrations"]?.arrayValue?.count == 3)
            let export = try await s.request("GET", "\(base)/users/\(person):export", headers: s.serverHeaders)
            #expect(export.status == 200 && export.json?["installations"]?.arrayValue?.count == 3)
            #expect(!export.text.contains(":tok0"), "an export shows tokens masked")
            _ = try await s.app.jobs.relayEvents()
            let erased = try await s.request("POST", "\(base)/users/\(person):erase", headers: s.serverHeaders)
            #expect(erased.status == 200, "\(erased)")
            let id = try #require(erased.json?["erasureId"]?.stringValue)
            #expect(erased.json?["installations"]?.arrayValue?.count == 3)
            _ = try await s.app.jobs.runAll()
            let receipt = try await s.request("GET", "\(base)/erasures/\(id)", headers: s.serverHeaders)
            #expect(receipt.json?["state"]?.stringValue == "pending")
            for item in receipt.json?["installations"]?.arrayValue ?? [] {
                let states = Dictionary(
                    uniqueKeysWithValues: (item["services"]?.arrayValue ?? []).map {
                        ($0["name"]?.stringValue ?? "", $0["state"]?.stringValue ?? "")
                    })
                #expect(states == ["crm": "acknowledged", "mail": "pending"], "\(item.text)")
            }
            #expect(
                try await s.request("GET", "\(base)/users/\(person)", headers: s.serverHeaders).json?["installations"]?
                    .arrayValue?.isEmpty == true)
            clock.advance(by: 181 * 86_400)
            _ = try await s.app.jobs.runAll()
            for needle in [person] + fids {
                #expect(try await Self.holders(of: needle, in: s) == [], "\(needle) survives")
            }
            // The receipt stays, by keyed hashes: overdue for the service that never confirmed.
            let late = try await s.request("GET", "\(base)/erasures/\(id)", headers: s.serverHeaders)
            #expect(late.json?["state"]?.stringValue == "overdue")
            #expect(late.json?["installations"]?.arrayValue?.allSatisfy { $0["fid"] == .null } == true)
            #expect(!late.text.contains(person))
            // The audit log still verifies, with the subjects' clear IDs gone from it.
            let report = try await s.app.services.audit.verify(projectID: s.project.id)
            #expect(report.intact && report.checked > 10, "\(report)")
            let log = try await s.request("GET", "\(base)/auditLog?pageSize=1000", headers: s.serverHeaders)
            #expect(log.json?["entries"]?.arrayValue?.contains { $0["action"]?.stringValue == "users.erase" } == true)
        }
        await confirms.server.shutdown(drainTimeout: 1)
        await neverConfirms.server.shutdown(drainTimeout: 1)
    }

    /// A login, a logout, a move off the person's shared device and the person's erasure, all waiting on the person's
    /// lock (another session holds it): each of the four must queue (a version that took no lock on any of them
    /// fails the count), and once it is let go, whatever order they ran in, no installation of another person was
    /// erased and the receipt names what the person got after.
    @Test func aLoginALogoutAMoveAndAnErasureOfOnePersonQueueBehindItsLock() async throws {
        // All four wait at once, each on a connection: one project's share is the whole pool here (it is two of the
        // eight by default, and the other two would wait for the project's connections instead of the lock).
        try await TestService.with(configure: { $0.databaseProjectShare = 8 }) { s in
            let base = "/v1/projects/\(s.project.id)"
            let phone = try await s.createInstallation()
            let tablet = try await s.createInstallation()
            let shared = try await s.createInstallation()
            let fresh = try await s.createInstallation()
            for i in [phone, tablet, shared] { #expect(try await Self.bind(s, i.fid, "carol") == 200) }
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            try await session.lockUser("carol", projectID: s.project.id)
            let erase = Task { try await s.request("POST", "\(base)/users/carol:erase", headers: s.serverHeaders) }
            let move = Task { try await Self.bind(s, shared.fid, "dave") }
            let login = Task { try await Self.bind(s, fresh.fid, "carol") }
            let logout = Task {
                try await s.request("DELETE", "\(base)/installations/\(tablet.fid)/user", headers: s.serverHeaders)
                    .status
            }
            try await session.waitUntilBlocked(4)
            try await session.execute("COMMIT")
            let receipt = try await erase.value
            #expect(receipt.status == 200, "\(receipt)")
            let (moved, loggedIn, loggedOut) = (try await move.value, try await login.value, try await logout.value)
            let erased = Set((receipt.json?["installations"]?.arrayValue ?? []).compactMap { $0["fid"]?.stringValue })
            func exists(_ fid: String) async throws -> Bool {
                try await s.app.installations.find(project: s.project, fid: fid) != nil
            }
            let phoneExists = try await exists(phone.fid)
            let sharedExists = try await exists(shared.fid)
            let tabletExists = try await exists(tablet.fid)
            #expect(erased.contains(phone.fid) && !phoneExists)
            // The move ran first (the device is Dave's and stays) or after (it was Carol's and went: 404).
            #expect(moved == 200 ? !erased.contains(shared.fid) && sharedExists : erased.contains(shared.fid))
            // The logout ran first (the tablet stays, unbound) or after (it was erased: 404).
            #expect(loggedOut == 200 ? !erased.contains(tablet.fid) && tabletExists : erased.contains(tablet.fid))
            #expect(moved != 409 && loggedOut != 409 && loggedIn != 409)
            // The login ran first (erased with the rest) or after (named on the receipt, not erased).
            let after = try await s.request(
                "GET", "\(base)/erasures/\(try #require(receipt.json?["erasureId"]?.stringValue))", headers: s.serverHeaders)
            let boundAfter = (after.json?["boundAfter"]?.arrayValue ?? []).compactMap { $0["fid"]?.stringValue }
            #expect(loggedIn == 200)
            #expect(erased.contains(fresh.fid) != boundAfter.contains(fresh.fid))
            // Dave's devices are never among what Carol's erasure took.
            let daves = try await s.request("GET", "\(base)/users/dave", headers: s.serverHeaders)
            for item in daves.json?["installations"]?.arrayValue ?? [] {
                #expect(!erased.contains(item["fid"]?.stringValue ?? ""))
            }
        }
    }

    /// The chain detects an edited, a deleted and a reordered entry, and a purge of an old segment leaves it
    /// verifiable from its new anchor.
    /// Erasures of one project on a replica: two at a time. Two erasures queue behind the person's lock (held here by
    /// another session); a third, of another person, is refused 429 at once rather than take a third connection; once
    /// the lock is let go both finish, and the project may erase again.
    @Test func aThirdErasureOfAProjectIsRefusedWhileTwoWait() async throws {
        try await TestService.with { s in
            let base = "/v1/projects/\(s.project.id)"
            let device = try await s.createInstallation()
            #expect(try await Self.bind(s, device.fid, "erin") == 200)
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            try await session.lockUser("erin", projectID: s.project.id)
            let first = Task { try await s.request("POST", "\(base)/users/erin:erase", headers: s.serverHeaders) }
            let second = Task { try await s.request("POST", "\(base)/users/erin:erase", headers: s.serverHeaders) }
            try await session.waitUntilBlocked(2)
            let third = try await s.request("POST", "\(base)/users/frank:erase", headers: s.serverHeaders)
            #expect(third.status == 429 && third.errorStatus == "RESOURCE_EXHAUSTED", "\(third)")
            #expect(third.header("retry-after") != nil)
            try await session.execute("COMMIT")
            #expect(try await first.value.status == 200)
            #expect(try await second.value.status == 200)
            #expect(try await s.request("POST", "\(base)/users/frank:erase", headers: s.serverHeaders).status == 200)
        }
    }

    @Test func theChainDetectsAnEditedADeletedAndAReorderedEntry() async throws {
        let clock = ManualClock(Date())
        try await TestService.with(clock: clock) { s in
            let base = "/v1/projects/\(s.project.id)"
            for n in 0..<6 {
                _ = try await s.request(
                    "POST", "\(base)/linkedServices", headers: s.serverHeaders,
                    json: ["name": .string("svc\(n)"), "endpoint": "https://svc.example/hook"])
            }
            let audit = s.app.services.audit
            try await audit.chain()
            #expect(try await audit.verify(projectID: s.project.id).intact)
            // Tampering needs the trigger off, as a superuser with the database in hand would do.
            let conn = try await SecondSession(conninfo: s.conninfo)
            func check(_ sql: String, _ problem: String) async throws {
                try await conn.execute("BEGIN; ALTER TABLE audit_log DISABLE TRIGGER USER; \(sql)")
                // The check reads through the service's own pool, which sees only what is committed: commit, verify,
                // then undo by restoring the saved rows.
                try await conn.execute("COMMIT")
                let report = try await audit.verify(projectID: s.project.id)
                #expect(!report.intact, "\(sql) went unnoticed")
                #expect(report.problems.contains { $0.contains(problem) }, "\(sql): \(report.problems)")
                try await conn.execute(
                    """
                    BEGIN; ALTER TABLE audit_log DISABLE TRIGGER USER;
                    DELETE FROM audit_log WHERE project_id = '\(s.project.id)';
                    INSERT INTO audit_log SELECT * FROM audit_saved; ALTER TABLE audit_log ENABLE TRIGGER USER; COMMIT
                    """)
                #expect(try await audit.verify(projectID: s.project.id).intact)
            }
            try await conn.execute("CREATE TABLE audit_saved AS SELECT * FROM audit_log")
            try await check(
                "UPDATE audit_log SET outcome = 'PERMISSION_DENIED' WHERE project_id = '\(s.project.id)' AND seq = 3",
                "was edited")
            try await check("DELETE FROM audit_log WHERE project_id = '\(s.project.id)' AND seq = 4", "removed")
            try await check(
                """
                UPDATE audit_log SET seq = -seq WHERE project_id = '\(s.project.id)' AND seq IN (2, 5);
                UPDATE audit_log SET seq = 7 - (-seq) WHERE project_id = '\(s.project.id)' AND seq IN (-2, -5)
                """, "previous hash")
            try await check("DELETE FROM audit_log WHERE project_id = '\(s.project.id)' AND seq = 6", "entries were removed")
            // Edits, deletions, truncation and a chain's head moving back are refused while the triggers stand.
            for sql in [
                "UPDATE audit_log SET outcome = 'X' WHERE project_id = '\(s.project.id)'",
                "DELETE FROM audit_log WHERE project_id = '\(s.project.id)' AND seq = 6",
                "TRUNCATE audit_log", "UPDATE audit_chains SET head_seq = head_seq - 1",
                "DELETE FROM audit_chains",
            ] {
                await #expect(throws: (any Error).self, "\(sql)") { try await conn.execute(sql) }
            }
            // A head recorded elsewhere (the jobs log each) that the chain no longer has is a rewrite or a cut.
            let head = try #require(try await audit.state(projectID: s.project.id))
            #expect(try await audit.verify(projectID: s.project.id, expected: [(head.headSeq, head.headHash)]).intact)
            let rewritten = try await audit.verify(
                projectID: s.project.id, expected: [(3, [UInt8](repeating: 7, count: 32))])
            #expect(rewritten.problems.contains { $0.contains("recorded for it") }, "\(rewritten.problems)")
            let cut = try await audit.verify(projectID: s.project.id, expected: [(head.headSeq + 5, head.headHash)])
            #expect(cut.problems.contains { $0.contains("missing") }, "\(cut.problems)")
            // A purge past the retention keeps the rest verifiable from the new anchor.
            clock.advance(by: 401 * 86_400)
            _ = try await s.request(
                "POST", "\(base)/linkedServices", headers: s.serverHeaders,
                json: ["name": "late", "endpoint": "https://svc.example/hook"])
            try await audit.chain()
            #expect(try await audit.purge(now: clock.now()) == 6)
            let state = try #require(try await audit.state(projectID: s.project.id))
            #expect(state.anchorSeq == 6 && state.headSeq == 7)
            let report = try await audit.verify(projectID: s.project.id)
            #expect(report.intact && report.checked == 1, "\(report)")
            // The purge says so in the chain it shortened.
            try await audit.chain()
            let last = try await audit.entries(projectID: s.project.id, afterSeq: 7, limit: 10)
            #expect(last.map(\.action) == ["audit.purge"] && last.first?.requestID == "purge-6")
            #expect(try await audit.verify(projectID: s.project.id).intact)
        }
    }
}
