import Foundation
import JSON
import Postgres
import Registry
import RegistryPostgres
import Testing
import TokenRegistryTesting

/// Each guarantee under the interleaving that used to break it, forced: a second session holds the lock the
/// requests need, the racing requests queue behind it, then it lets go. Every test here failed before its fix.
@Suite("Forced interleavings", .enabled(if: TestDatabase.isAvailable))
struct InterleavingTests {
    /// A service whose group-committed writes wait on a lock in their batch as long as it is held: each test here
    /// holds the lock for as long as it takes to line the racing requests up, and is about the order they meet in the
    /// database, not about how long a batch waits (that is `PipelineTests.aWriteBlockedByALockLeavesItsBatch…`).
    static func service(_ body: (TestService) async throws -> Void) async throws {
        try await TestService.with(configure: { $0.databaseBatchLockWaitMillis = 0 }, body)
    }

    /// A server deletion of `fid` that stops after it has removed the installation, before it commits: the second
    /// session returned holds the deletions table until it commits.
    static func deletionHeldAfterItsDelete(_ s: TestService, _ fid: String) async throws
        -> (SecondSession, Task<Reply, any Error>)
    {
        let session = try await SecondSession(conninfo: s.conninfo)
        try await session.execute("BEGIN; LOCK TABLE deletions IN EXCLUSIVE MODE")
        let delete = Task {
            try await s.request("DELETE", "/v1/project/\(s.project.id)/instanceId/\(fid)", headers: s.serverHeaders)
        }
        try await session.waitUntilBlocked(1)
        return (session, delete)
    }

    static func fis(_ i: CreatedInstallationReply) -> [String: String] {
        ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"]
    }

    /// A withdrawal that commits while a client registration is between its consent check and its write must not
    /// leave an active registration.
    @Test func aWithdrawalIsNeverOvertakenByARegistration() async throws {
        try await Self.service { s in
            let i = try await s.createInstallation()
            let session = try await SecondSession(conninfo: s.conninfo)
            // Registrations cannot be written while this is held; consent rows and reads can.
            try await session.execute("BEGIN; LOCK TABLE registrations IN EXCLUSIVE MODE")
            let register = Task {
                try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/registrations", headers: Self.fis(i),
                    json: Bodies.webRegistration)
            }
            try await session.waitUntilBlocked(1)
            let withdraw = Task {
                try await s.request(
                    "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent", headers: Self.fis(i),
                    json: ["autoInitEnabled": false])
            }
            try await session.waitUntilBlocked(2)
            try await session.execute("COMMIT")
            _ = try await register.value
            #expect(try await withdraw.value.status == 200)
            let active = try await s.pool.query(
                "SELECT count(*) AS n FROM registrations WHERE fid = \(i.fid) AND state = 'active'")
            #expect(try active.first?.require("n", as: Int.self) == 0)
            let sendability = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/registrations/\(i.fid):sendability", headers: s.serverHeaders)
            #expect(sendability.json?["reason"]?.stringValue == "NO_CONSENT")
        }
    }

    /// A token another installation writes, not yet committed when the callback looks for its holder: the callback
    /// waits on the token's unique index, and once the other commits it takes the token from it (not a 409).
    @Test func aTokenWrittenConcurrentlyForAnotherInstallationIsTakenOverOnceItCommits() async throws {
        try await Self.service { s in
            let holder = try await s.createInstallation()
            let taker = try await s.createInstallation()
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query(
                """
                INSERT INTO registrations (project_id, fid, token, platform, state, created_at, refreshed_at)
                VALUES (\(s.project.id), \(holder.fid), 'shared-token', 'android', 'active', now(), now())
                """)
            let callback = Task {
                try await s.request(
                    "PUT", "/v1/projects/\(s.project.id)/installations/\(taker.fid)/registration",
                    headers: s.serverHeaders, json: ["token": "shared-token", "platform": "android"])
            }
            try await session.waitUntilBlocked(1)
            try await session.execute("COMMIT")
            let reply = try await callback.value
            #expect(reply.status == 200, "\(reply)")
            #expect(reply.json?["outcome"]?.stringValue == "moved")
            let rows = try await s.pool.query("SELECT fid FROM registrations WHERE token = 'shared-token'")
            #expect(try rows.map { try $0.require("fid", as: String.self) } == [taker.fid])
        }
    }

    /// A deadlock between a refresh callback and another session (each holds a row the other wants) is answered 503
    /// with Retry-After, which every client retries, never 409; the retry then succeeds.
    @Test func aDeadlockIsAnsweredWithARetryableStatus() async throws {
        try await Self.service { s in
            let holder = try await s.createInstallation()
            let taker = try await s.createInstallation()
            func callback(_ fid: String) async throws -> Reply {
                try await s.request(
                    "PUT", "/v1/projects/\(s.project.id)/installations/\(fid)/registration", headers: s.serverHeaders,
                    json: ["token": "contested-token", "platform": "android"])
            }
            #expect(try await callback(holder.fid).status == 200)
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            // The session holds the holder's registration; the callback locks the taker's installation, then waits
            // for that registration (to take its token); the session then asks for the taker's installation.
            _ = try await session.query("SELECT 1 FROM registrations WHERE fid = \(holder.fid) FOR UPDATE")
            let taking = Task { try await callback(taker.fid) }
            try await session.waitUntilBlocked(1)
            let closing = Task {
                _ = try? await session.query("SELECT 1 FROM installations WHERE fid = \(taker.fid) FOR UPDATE")
                try await session.execute("ROLLBACK")
            }
            let reply = try await taking.value
            try await closing.value
            #expect([200, 503].contains(reply.status), "\(reply)")
            if reply.status == 503 { #expect(reply.header("retry-after") != nil) }
            #expect(try await callback(taker.fid).json?["outcome"]?.stringValue != nil)
        }
    }

    /// A serialization failure (SQLSTATE 40001, raised by the server inside the route's own statement: a trigger
    /// stands in for the concurrent update that causes one) answers 503 with Retry-After in every route's shape:
    /// the Google JSON of the refresh callback and the FIS create, and the register API's `Error=` text. Once the
    /// conflict is gone the same requests succeed.
    @Test func aSerializationFailureIsAnsweredWithARetryableStatusInEveryShape() async throws {
        try await Self.service { s in
            let i = try await s.createInstallation(app: s.ios)
            let checkin = try await s.request(
                "POST", "/checkin", headers: ["content-type": "application/json"], json: ["id": 0, "security_token": 0])
            let device = (
                try #require(checkin.json?["android_id"]?.int64Value), try #require(checkin.json?["security_token"]?.int64Value)
            )
            func callback() async throws -> Reply {
                try await s.request(
                    "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                    json: ["token": .string(i.fid + ":tok"), "platform": "ios"])
            }
            func register() async throws -> Reply {
                try await s.request(
                    "POST", "/register",
                    headers: [
                        "Authorization": "AidLogin \(device.0):\(device.1)", "x-goog-firebase-installations-auth": i.authToken,
                        "Content-Type": "application/x-www-form-urlencoded",
                    ], body: Bodies.form([("app", "com.example.app"), ("sender", "123456789012"), ("appid", i.fid)]))
            }
            func create() async throws -> Reply {
                try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/installations", headers: ["x-goog-api-key": s.ios.apiKey],
                    json: ["appId": .string(s.ios.id), "authVersion": "FIS_v2", "sdkVersion": "i:12.19.0"])
            }
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute(
                """
                        CREATE FUNCTION conflict() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                            RAISE EXCEPTION 'could not serialize access due to concurrent update' USING ERRCODE = '40001';
                        END $$;
                        CREATE TRIGGER conflict BEFORE INSERT OR UPDATE ON registrations FOR EACH ROW EXECUTE FUNCTION conflict();
                        CREATE TRIGGER conflict BEFORE INSERT ON installations FOR EACH ROW EXECUTE FUNCTION conflict();
                        """)
            let failed = try await callback()
            #expect(failed.status == 503 && failed.header("retry-after") != nil, "\(failed)")
            #expect(failed.json?["error"]?["status"]?.stringValue == "UNAVAILABLE")
            let text = try await register()
            #expect(text.status == 503 && text.text == "Error=SERVICE_NOT_AVAILABLE", "\(text)")
            #expect(text.header("retry-after") != nil)
            let fis = try await create()
            #expect(fis.status == 503 && fis.header("retry-after") != nil, "\(fis)")
            try await session.execute("DROP TRIGGER conflict ON registrations; DROP TRIGGER conflict ON installations")
            #expect(try await callback().status == 200)
            #expect(try await register().text.hasPrefix("token="))
            #expect(try await create().status == 200)
        }
    }

    /// Send feedback that a token is dead, racing a refresh that replaces it: the feedback queues behind the
    /// registration's lock while the refresh commits the new token, then must find its token gone and retire nothing.
    /// Matching the registration before the lock (by FID, say) retires the new token and fails this test.
    @Test func feedbackRacingARefreshNeverRetiresTheNewToken() async throws {
        try await Self.service { s in
            let i = try await s.createInstallation()
            let old = i.fid + ":old-token"
            let new = i.fid + ":new-token"
            _ = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                json: ["token": .string(old), "platform": "android"])
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query("SELECT 1 FROM registrations WHERE fid = \(i.fid) FOR UPDATE")
            let feedback = Task {
                try await s.request(
                    "POST", "/v1/projects/\(s.project.id)/feedback", headers: s.serverHeaders,
                    json: ["results": [["token": .string(old), "legacy": "NotRegistered"]]])
            }
            try await session.waitUntilBlocked(1)
            // What the refresh callback's statement does to the row, committed while the feedback waits.
            _ = try await session.query(
                "UPDATE registrations SET token = \(new), refreshed_at = now() WHERE fid = \(i.fid)")
            try await session.execute("COMMIT")
            let reply = try await feedback.value
            #expect(reply.json?["decisions"]?.arrayValue?.first?["action"] == "not_current", "\(reply)")
            let verdict = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/registrations/\(new):sendability", headers: s.serverHeaders)
            #expect(verdict.json?["reason"] == "OK", "\(verdict)")
        }
    }

    /// Two refresh callbacks for one installation, the newer one first: the older must not overwrite it.
    @Test func theNewestClientTimeWinsWhateverTheOrder() async throws {
        try await Self.service { s in
            let i = try await s.createInstallation()
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query("SELECT 1 FROM installations WHERE fid = \(i.fid) FOR UPDATE")
            let now = Date()
            func callback(_ token: String, _ offset: TimeInterval) -> Task<Reply, any Error> {
                Task {
                    try await s.request(
                        "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/registration",
                        headers: s.serverHeaders,
                        json: [
                            "token": .string(token), "platform": "android",
                            "clientTime": .string(Timestamp.rfc3339(now.addingTimeInterval(offset))),
                        ])
                }
            }
            let newer = callback("tok-newer", 10)
            try await session.waitUntilBlocked(1)
            let older = callback("tok-older", 5)
            try await session.waitUntilBlocked(2)
            try await session.execute("COMMIT")
            #expect(try await newer.value.status == 200)
            #expect(try await older.value.json?["outcome"]?.stringValue == "ignored_as_older")
            let stored = try await s.pool.query("SELECT token FROM registrations WHERE fid = \(i.fid)")
            #expect(try stored.first?.require("token", as: String.self) == "tok-newer")
        }
    }

    /// A withdrawal that commits while a refresh callback waits for the installation's lock: the callback, one
    /// round trip in the database since migration 11, must read consent after the lock and store nothing.
    @Test func aCallbackQueuedBehindAWithdrawalStoresNothing() async throws {
        try await Self.service { s in
            let i = try await s.createInstallation()
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query("SELECT 1 FROM installations WHERE fid = \(i.fid) FOR UPDATE")
            let callback = Task {
                try await s.request(
                    "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/registration",
                    headers: s.serverHeaders, json: ["token": "tok-after-withdrawal", "platform": "android"])
            }
            try await session.waitUntilBlocked(1)
            _ = try await session.query(
                "UPDATE consents SET granted = false WHERE fid = \(i.fid) AND purpose = 'messaging'")
            try await session.execute("COMMIT")
            let reply = try await callback.value
            #expect(
                reply.status == 400 && reply.json?["error"]?["status"]?.stringValue == "FAILED_PRECONDITION", "\(reply)"
            )
            let stored = try await s.pool.query("SELECT count(*) AS n FROM registrations WHERE fid = \(i.fid)")
            #expect(try stored.first?.require("n", as: Int.self) == 0)
        }
    }

    /// Three sender tokens asked for at once when the installation has room for one: each counts after the
    /// installation's lock, so the ones queued behind it count the others' tokens. Counting before the lock lets all
    /// three pass (their inserts only wait at the foreign key) and this test fails.
    @Test func senderTokensQueuedBehindTheInstallationsLockCountOneAfterAnother() async throws {
        try await Self.service { s in
            let reply = try await s.createInstallation()
            let i = try #require(try await s.app.installations.find(project: s.project, fid: reply.fid))
            for n in 0..<(RegistrationService.maxSenderTokens - 1) {
                _ = try await s.app.registrations.senderToken(installation: i, sender: "held-\(n)", scope: "*")
            }
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query("SELECT 1 FROM installations WHERE fid = \(i.fid) FOR UPDATE")
            let racers = (0..<3).map { n in
                Task { try await s.app.registrations.senderToken(installation: i, sender: "racer-\(n)", scope: "*") }
            }
            try await session.waitUntilBlocked(3)
            try await session.execute("COMMIT")
            var granted = 0
            for racer in racers {
                do {
                    _ = try await racer.value
                    granted += 1
                } catch let error as RegistryError {
                    #expect(error.kind == .resourceExhausted, "\(error)")
                }
            }
            #expect(granted == 1)
            let held = try await s.pool.query("SELECT count(*) AS n FROM sender_tokens WHERE fid = \(i.fid)")
            #expect(try held.first?.require("n", as: Int.self) == RegistrationService.maxSenderTokens)
        }
    }

    /// Subscribes of two installations queue behind a lock, and one installation's consent is withdrawn meanwhile.
    /// Both wait in PostgreSQL (one statement each since migration 14, group-committed); each must read consent
    /// after its installation's lock, so only the other installation gains the topic. Reading consent before the
    /// lock fails this test.
    @Test func aSubscribeQueuedBehindAWithdrawalAddsNothing() async throws {
        try await Self.service { s in
            let withdrawn = try await s.createInstallation()
            let other = try await s.createInstallation()
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query(
                "SELECT 1 FROM installations WHERE fid IN (\(withdrawn.fid), \(other.fid)) FOR UPDATE")
            func subscribe(_ i: CreatedInstallationReply) -> Task<Reply, any Error> {
                Task {
                    try await s.request(
                        "POST",
                        "/v1/projects/\(s.project.id)/registrations/\(i.fid)/topicSubscriptions/news:subscribe",
                        headers: Self.fis(i))
                }
            }
            let refused = subscribe(withdrawn)
            let added = subscribe(other)
            try await session.waitUntilBlocked(2)
            _ = try await session.query(
                "UPDATE consents SET granted = false WHERE fid = \(withdrawn.fid) AND purpose = 'messaging'")
            try await session.execute("COMMIT")
            let reply = try await refused.value
            #expect(
                reply.status == 400 && reply.json?["error"]?["status"]?.stringValue == "FAILED_PRECONDITION", "\(reply)"
            )
            #expect(try await added.value.status == 200)
            let stored = try await s.pool.query("SELECT fid FROM topic_subscriptions WHERE topic = 'news'")
            #expect(try stored.map { try $0.require("fid", as: String.self) } == [other.fid])
        }
    }

    /// `clientTime` far ahead of the database's clock, or before 2000, is refused naming the field.
    @Test(arguments: ["9999-12-31T23:59:59Z", "0000-01-01T00:00:00Z", "1999-12-31T23:59:59Z", "+10m"])
    func clientTimesOutOfRangeAreRefused(_ text: String) async throws {
        try await Self.service { s in
            let i = try await s.createInstallation()
            let value = text == "+10m" ? Timestamp.rfc3339(Date().addingTimeInterval(600)) : text
            let reply = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/registration", headers: s.serverHeaders,
                json: ["token": "tok", "platform": "android", "clientTime": .string(value)])
            #expect(reply.status == 400, "\(reply)")
            #expect(reply.json?["error"]?["message"]?.stringValue?.hasPrefix("clientTime") == true, "\(reply)")
        }
    }

    /// With no linked service, a deletion is complete at once.
    @Test func aDeletionWithNoLinkedServiceIsDoneAtOnce() async throws {
        try await Self.service { s in
            let i = try await s.createInstallation()
            let deleted = try await s.request(
                "DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)", headers: s.serverHeaders)
            #expect(deleted.status == 200)
            let receipt = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/deletions/\(i.fid)", headers: s.serverHeaders)
            #expect(receipt.json?["state"]?.stringValue == "done", "\(receipt)")
            let metrics = try await s.request("GET", "/metrics").text
            #expect(metrics.contains("registry_oldest_undelivered_deletion_seconds 0"))
            #expect(metrics.contains("registry_deletions{state=\"pending\"} 0"))
        }
    }

    /// A create of a FID that races its deletion, waiting on the deleting transaction, must not bring it back.
    @Test func aDeletedFIDNeverComesBack() async throws {
        try await Self.service { s in
            let i = try await s.createInstallation()
            let (session, delete) = try await Self.deletionHeldAfterItsDelete(s, i.fid)
            let create = Task { try await s.createInstallation(fid: i.fid) }
            try await session.waitUntilBlocked(2)
            try await session.execute("COMMIT")
            #expect(try await delete.value.status == 200)
            let created = try await create.value
            #expect(created.fid != i.fid)
            let live = try await s.pool.query("SELECT count(*) AS n FROM installations WHERE fid = \(i.fid)")
            #expect(try live.first?.require("n", as: Int.self) == 0)
            // Its auth token stays dead.
            let consent = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent", headers: Self.fis(i))
            #expect(consent.status == 401)
        }
    }

    /// An import batch that holds an FID being deleted: the deletion has removed the installation and waits (another
    /// session holds the deletions table), the import's insert waits for it, and then must not make the FID again.
    /// (Its retired check ran in a snapshot taken before the retirement committed: without the check after the
    /// insert the installation came back, with its token, topics and consent.)
    @Test func anImportNeverBringsBackAnFIDDeletedWhileItWaits() async throws {
        struct Rows: ImportReader {
            var rows: [ImportRow]
            mutating func next() throws -> ImportRow? { rows.isEmpty ? nil : rows.removeFirst() }
        }
        try await Self.service { s in
            let i = try await s.createInstallation()
            var record = ImportRecord(line: 1, sourceKey: "k1", platform: .android)
            record.fid = i.fid
            record.token = i.fid + ":APA91bImported"
            let seen = Date()
            record.lastSeenAt = seen
            record.refreshedAt = seen
            record.createdAt = seen.addingTimeInterval(-86_400)
            record.consentTime = seen
            record.messagingConsent = true
            record.topics = [TopicSubscription(topic: "news", createdAt: seen)]
            let (session, delete) = try await Self.deletionHeldAfterItsDelete(s, i.fid)
            let services = s.app.services
            let project = s.project
            let imported = Task {
                var reader = Rows(rows: [.record(record)])
                let android = try await services.catalog.createApp(
                    project: project, platform: .android, bundleID: nil, autoInitDefault: true)
                return try await services.imports.run(
                    project: project, apps: [android], format: .fcmDjango, reader: &reader, key: "late",
                    dryRun: false, batchSize: 10, bytes: { 0 }, progress: { _ in }, rejected: { _ in })
            }
            try await session.waitUntilBlocked(2)
            try await session.execute("COMMIT")
            #expect(try await delete.value.status == 200)
            let progress = try await imported.value
            #expect(progress.counts.deletedSkipped == 1 && progress.counts.installationsCreated == 0, "\(progress.counts)")
            for table in ["installations", "registrations", "topic_subscriptions", "consents"] {
                let rows = try await s.pool.query(
                    PostgresQuery(unsafeSQL: "SELECT count(*)::int AS n FROM \(table) WHERE fid = $1", binds: [i.fid]))
                #expect(try rows.first?.require("n", as: Int.self) == 0, "\(table)")
            }
        }
    }

    /// Two imports of one APNs token at once (an app server retrying after a time-out): another session holds the
    /// token's import lock, both queue behind it, and the second finds what the first made. (Each used to look in a
    /// snapshot without the other's and make an installation of its own: one device, two registrations.)
    @Test func twoImportsOfOneAPNsTokenMakeOneRegistration() async throws {
        try await Self.service { s in
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query(
                PostgresRegistry.apnsImportLocks(projectID: s.project.id, tokens: ["ABCDEF0123456789"]))
            let imports = (0..<2).map { _ in
                Task {
                    try await s.request(
                        "POST", "/iid/v1:batchImport", headers: s.serverHeaders,
                        json: ["application": "com.example.app", "apns_tokens": ["ABCDEF0123456789"]])
                }
            }
            try await session.waitUntilBlocked(2)
            try await session.execute("COMMIT")
            var tokens: Set<String> = []
            for i in imports {
                let answer = try await i.value
                #expect(answer.status == 200, "\(answer)")
                tokens.insert(answer.json?["results"]?.arrayValue?.first?["registration_token"]?.stringValue ?? "")
            }
            #expect(tokens.count == 1, "\(tokens)")
            let rows = try await s.pool.query(
                "SELECT count(*)::int AS n FROM registrations WHERE lower(apns_token) = 'abcdef0123456789'")
            #expect(try rows.first?.require("n", as: Int.self) == 1)
        }
    }

    /// Enrolments of check-ins for one installation with one place left under its cap: another session holds the
    /// installation's row, three queue behind it, and once it lets go exactly one is enrolled. (One statement's count
    /// let all three pass together, past the cap.)
    @Test func enrolmentsPastTheCapCountOneAfterAnother() async throws {
        try await Self.service { s in
            let i = try await s.createInstallation()
            let installation = try #require(try await s.app.installations.find(project: s.project, fid: i.fid))
            let checkins = s.app.services.checkins
            let cap = CheckinService.maxEnrolledPerInstallation
            for n in 0..<(cap - 1) {
                _ = try await checkins.enroll(DeviceCheckin(androidID: 800_000 + UInt64(n), securityToken: 7), for: installation)
            }
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query("SELECT 1 FROM installations WHERE fid = \(i.fid) FOR NO KEY UPDATE")
            let enrolments = (0..<3).map { n in
                Task {
                    (try? await checkins.enroll(
                        DeviceCheckin(androidID: 900_000 + UInt64(n), securityToken: 7), for: installation)) != nil
                }
            }
            try await session.waitUntilBlocked(3)
            try await session.execute("COMMIT")
            var enrolled = 0
            for e in enrolments where await e.value { enrolled += 1 }
            #expect(enrolled == 1)
            let rows = try await s.pool.query("SELECT count(*)::int AS n FROM checkins WHERE fid = \(i.fid)")
            #expect(try rows.first?.require("n", as: Int.self) == cap)
        }
    }

    /// A person's installation deleted by another request while the person's erasure waits for its row: the
    /// deletion has removed the installation and waits (another session holds the deletions table), the erasure
    /// queues behind it, and once both go on the person's receipt names that deletion too. (It was left out: the
    /// receipt could say done while the installation's own deletion was still owed to its services.)
    @Test func anErasureCountsAnInstallationDeletedWhileItWaited() async throws {
        try await Self.service { s in
            let i = try await s.createInstallation()
            let base = "/v1/projects/\(s.project.id)"
            #expect(
                try await s.request(
                    "PUT", "\(base)/installations/\(i.fid)/user", headers: s.serverHeaders, json: ["userId": "dana"]
                ).status == 200)
            let (session, delete) = try await Self.deletionHeldAfterItsDelete(s, i.fid)
            let erase = Task { try await s.request("POST", "\(base)/users/dana:erase", headers: s.serverHeaders) }
            try await session.waitUntilBlocked(2)
            try await session.execute("COMMIT")
            #expect(try await delete.value.status == 200)
            let erased = try await erase.value
            #expect(erased.status == 200, "\(erased)")
            let members = try await s.pool.query(
                "SELECT count(*)::int AS n FROM erasure_members WHERE project_id = \(s.project.id)")
            #expect(try members.first?.require("n", as: Int.self) == 1)
        }
    }

    /// With every connection of a pool of 2 held, a request is answered 503 with `Retry-After` within the acquire
    /// time-out, and the held ones complete once the lock goes.
    @Test func anExhaustedPoolAnswers503Fast() async throws {
        try await TestService.with(configure: {
            $0.databasePoolSize = 2
            $0.databaseAcquireTimeoutMillis = 300
            // The two writes hold their batches' connections while they wait (a pool held by whatever means).
            $0.databaseBatchLockWaitMillis = 0
        }) { s in
            let i = try await s.createInstallation()
            let session = try await SecondSession(conninfo: s.conninfo)
            try await session.execute("BEGIN")
            _ = try await session.query("SELECT 1 FROM installations WHERE fid = \(i.fid) FOR UPDATE")
            let consent = "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent"
            let held = (0..<2).map { n in
                Task {
                    try await s.request(
                        "PUT", consent, headers: s.serverHeaders, json: ["autoInitEnabled": .bool(n == 0)])
                }
            }
            try await session.waitUntilBlocked(2)
            let started = ContinuousClock.now
            let refused = try await s.request("GET", consent, headers: s.serverHeaders)
            let elapsed = ContinuousClock.now - started
            #expect(refused.status == 503 && refused.header("retry-after") == "1", "\(refused)")
            #expect(elapsed < .seconds(2), "answered after \(elapsed)")
            try await session.execute("COMMIT")
            for task in held { #expect(try await task.value.status == 200) }
            #expect(try await s.request("GET", consent, headers: s.serverHeaders).status == 200)
        }
    }
}
