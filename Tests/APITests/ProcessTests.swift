import Crypto
import Foundation
import Glibc
import JSON
import Testing
import TokenRegistryTesting

/// The real binary: graceful drain on SIGTERM, readiness through a database outage, configuration errors.
@Suite("Service process", .enabled(if: ServiceProcess.isAvailable), .serialized)
struct ProcessTests {
    @Test func sigtermLetsTheRequestInFlightFinishAndExitsZero() async throws {
        let url = try await TestDatabase.create()
        defer { Task { await TestDatabase.drop(url) } }
        let env = ["DATABASE_URL": url, "LOG_LEVEL": "info", "DRAIN_TIMEOUT_SECONDS": "10"]
        let service = try ServiceProcess(environment: env)
        try await service.waitForReadiness()
        let project = try JSONParser.parse(
            try await ServiceProcess.command(
                ["project", "create", "--id", "drain-test", "--number", "777"], environment: env))
        #expect(project["serverKey"]?.stringValue?.hasPrefix("trs_") == true)
        let app = try JSONParser.parse(
            try await ServiceProcess.command(
                ["app", "create", "--project", "777", "--platform", "web"], environment: env))
        let appID = try #require(app["appId"]?.stringValue)
        let apiKey = try #require(app["apiKey"]?.stringValue)
        let body = Array(#"{"appId":"\#(appID)","authVersion":"FIS_v2"}"#.utf8)
        let client = try RawHTTPClient(port: service.port)
        try await client.send(
            Array(
                "POST /v1/projects/drain-test/installations HTTP/1.1\r\nHost: x\r\nx-goog-api-key: \(apiKey)\r\nContent-Length: \(body.count)\r\n\r\n"
                    .utf8)
                + body.prefix(10))
        try await Task.sleep(for: .milliseconds(200))
        service.signal(SIGTERM)
        try await Task.sleep(for: .milliseconds(500))
        // Draining: the listener is closed, the half-sent request is still being waited for.
        #expect(throws: (any Error).self) { _ = try RawHTTPClient(port: service.port) }
        try await client.send(Array(body.dropFirst(10)))
        let response = try #require(try await client.readResponse())
        #expect(response.status == 200, "\(response.text)")
        #expect(response.header("connection") == "close")
        #expect(try await service.waitForExit() == 0)
        #expect(service.log.contains("\"msg\":\"stopped\""))
    }

    @Test func aSecondSIGTERMEndsTheDrainAtOnce() async throws {
        let url = try await TestDatabase.create()
        defer { Task { await TestDatabase.drop(url) } }
        let env = ["DATABASE_URL": url, "LOG_LEVEL": "info", "DRAIN_TIMEOUT_SECONDS": "120"]
        let service = try ServiceProcess(environment: env)
        try await service.waitForReadiness()
        // A request the drain would wait for: its head is sent, its body never is.
        let client = try RawHTTPClient(port: service.port)
        try await client.send(Array("POST /checkin HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{".utf8))
        try await Task.sleep(for: .milliseconds(200))
        service.signal(SIGTERM)
        try await Task.sleep(for: .milliseconds(500))
        #expect(throws: (any Error).self) { _ = try RawHTTPClient(port: service.port) }
        let forced = ContinuousClock.now
        service.signal(SIGTERM)
        #expect(try await service.waitForExit(timeout: 10) == 0)
        #expect(ContinuousClock.now - forced < .seconds(5), "the second signal ends a 120 s drain")
        #expect(service.log.contains("second signal: stopping now"))
        #expect(service.log.contains("\"msg\":\"stopped\""))
    }

    @Test func readinessFollowsTheDatabase() async throws {
        try await Self.stopAbandonedClusters()
        // Named by this process, so a later run can tell the cluster was abandoned if this one dies mid-test.
        let root = "\(Self.clusterPrefix)\(getpid())-\(UUID().uuidString.prefix(8))"
        let port = ServiceProcess.freePort()
        let env = ["PG_ROOT": root, "PG_PORT": String(port)]
        try await shell("scripts/pg-test-cluster.sh start", environment: env)
        let service = try ServiceProcess(environment: [
            "DATABASE_URL": "host=\(root) port=\(port) dbname=postgres user=postgres connect_timeout=2"
        ])
        do {
            try await service.waitForReadiness(200)
            try await shell("scripts/pg-test-cluster.sh stop", environment: env)
            try await service.waitForReadiness(503, timeout: 15)
            try await shell("scripts/pg-test-cluster.sh start", environment: env)
            try await service.waitForReadiness(200, timeout: 20)
        } catch {
            service.signal(SIGKILL)
            _ = try? await shell("scripts/pg-test-cluster.sh stop; rm -rf \(root)", environment: env)
            throw error
        }
        service.signal(SIGTERM)
        #expect(try await service.waitForExit() == 0)
        try await shell("scripts/pg-test-cluster.sh stop; rm -rf \(root)", environment: env)
    }

    static let clusterPrefix = "/tmp/tr-readyz-"

    /// Stops and removes the private clusters of earlier test processes that died mid-test (a crash of the test
    /// process skips the clean-up, and their PostgreSQL kept running).
    static func stopAbandonedClusters() async throws {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/tmp")) ?? []
        for name in names where "/tmp/\(name)".hasPrefix(clusterPrefix) {
            let owner = name.dropFirst(clusterPrefix.count - "/tmp/".count).prefix { $0 != "-" }
            // No such process: the owner is gone (a running owner, or one of another user, is left alone).
            guard let pid = pid_t(owner), kill(pid, 0) != 0, errno == ESRCH else { continue }
            _ = try await shell(
                "scripts/pg-test-cluster.sh stop; rm -rf /tmp/\(name)", environment: ["PG_ROOT": "/tmp/\(name)"])
        }
    }

    @Test func anAbandonedClusterIsStoppedByTheNextRun() async throws {
        // A process that exits at once leaves its pid unused for now (pids are not reused until they wrap).
        let gone = try await shell("bash -c 'echo $$'").trimmingCharacters(in: .whitespacesAndNewlines)
        let root = "\(Self.clusterPrefix)\(gone)-abandon"
        let env = ["PG_ROOT": root, "PG_PORT": String(ServiceProcess.freePort())]
        try await shell("scripts/pg-test-cluster.sh start", environment: env)
        let postmaster = try String(contentsOfFile: "\(root)/data/postmaster.pid", encoding: .utf8)
        let pid = try #require(pid_t(postmaster.prefix { $0 != "\n" }))
        #expect(Self.isRunning(pid))
        try await Self.stopAbandonedClusters()
        #expect(!FileManager.default.fileExists(atPath: root))
        // `pg_ctl stop` returns once the pid file is gone, a moment before the postmaster's exit.
        for _ in 0..<50 where Self.isRunning(pid) { try await Task.sleep(for: .milliseconds(100)) }
        #expect(!Self.isRunning(pid))
    }

    /// A process that exists and has not exited (an exited postmaster may wait as a zombie for its reaper).
    static func isRunning(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return false }
        return stat[stat.index(close, offsetBy: 2)] != "Z"
    }

    @Test func jobsRunOnceAtAGivenTime() async throws {
        let url = try await TestDatabase.create()
        defer { Task { await TestDatabase.drop(url) } }
        let output = try await ServiceProcess.command(
            ["jobs", "run", "--now", "2030-01-01T00:00:00Z"], environment: ["DATABASE_URL": url])
        let done = try JSONParser.parse(output)
        #expect(
            done["deliver"] != nil && done["purge"] != nil && done["expire"] != nil && done["relay"] != nil, "\(output)"
        )
        await #expect(throws: (any Error).self) {
            try await ServiceProcess.command(["jobs", "run", "--now", "tomorrow"], environment: ["DATABASE_URL": url])
        }
    }

    @Test func appsKeepTheirFirebaseIdentitiesFromTheCommandLine() async throws {
        let url = try await TestDatabase.create()
        defer { Task { await TestDatabase.drop(url) } }
        let env = ["DATABASE_URL": url]
        _ = try await ServiceProcess.command(
            ["project", "create", "--id", "cli-proj", "--number", "4711"], environment: env)
        let output = try await ServiceProcess.command(
            [
                "app", "create", "--project", "cli-proj", "--platform", "android", "--app-id",
                "1:4711:android:00aa11bb22cc33dd", "--api-key", "AIzaSyA-existing-android-key-0123456789",
                "--web-origin",
                "https://a.example", "--web-origin", "HTTP://LOCALHOST:5173",
            ], environment: env)
        let app = try JSONParser.parse(output)
        #expect(app["appId"]?.stringValue == "1:4711:android:00aa11bb22cc33dd", "\(output)")
        #expect(app["apiKey"]?.stringValue == "AIzaSyA-existing-android-key-0123456789")
        #expect(
            app["webOrigins"]?.arrayValue?.compactMap(\.stringValue) == ["https://a.example", "http://localhost:5173"])
        await #expect(throws: (any Error).self) {
            try await ServiceProcess.command(
                ["app", "create", "--project", "cli-proj", "--platform", "web", "--app-id", "1:999:web:00"],
                environment: env)
        }
        // The credential file is written 0600, never printed, never over an existing file; list and revoke follow it.
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("sa-\(UUID().uuidString).json").path
        defer { unlink(file) }
        let printed = try await ServiceProcess.command(
            ["serviceaccount", "create", "--project", "cli-proj", "--base-url", "https://registry.example", "--out", file],
            environment: env)
        #expect(!printed.contains("PRIVATE KEY"))
        let attributes = try FileManager.default.attributesOfItem(atPath: file)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let account = try JSONParser.parse(Array(try #require(FileManager.default.contents(atPath: file))))
        #expect(account["type"]?.stringValue == "service_account" && account["project_id"]?.stringValue == "cli-proj")
        #expect(account["token_uri"]?.stringValue == "https://registry.example/token")
        await #expect(throws: (any Error).self) {
            try await ServiceProcess.command(
                ["serviceaccount", "create", "--project", "cli-proj", "--out", file], environment: env)
        }
        await #expect(throws: (any Error).self) {
            try await ServiceProcess.command(["serviceaccount", "create", "--project", "cli-proj"], environment: env)
        }
        let keyID = try #require(account["private_key_id"]?.stringValue)
        let listed = try JSONParser.parse(
            try await ServiceProcess.command(["serviceaccount", "list", "--project", "cli-proj"], environment: env))
        #expect(listed["serviceAccounts"]?.arrayValue?.map { $0["privateKeyId"]?.stringValue } == [keyID])
        _ = try await ServiceProcess.command(["serviceaccount", "revoke", "--key-id", keyID], environment: env)
        let after = try JSONParser.parse(
            try await ServiceProcess.command(["serviceaccount", "list", "--project", "cli-proj"], environment: env))
        #expect(after["serviceAccounts"]?.arrayValue?.first?["revokeTime"]?.stringValue != nil)
        // Send feedback's breaker: its status, and a clearance of one that is not tripped (refused, exit 1).
        let breakers = try JSONParser.parse(
            try await ServiceProcess.command(["breaker", "status", "--id", "cli-proj"], environment: env))
        #expect(breakers["breakers"]?.arrayValue == [], "\(breakers)")
        await #expect(throws: (any Error).self) {
            try await ServiceProcess.command(["breaker", "clear", "--id", "cli-proj", "--channel", "apns"], environment: env)
        }
        await #expect(throws: (any Error).self) {
            try await ServiceProcess.command(["breaker", "clear", "--id", "cli-proj", "--channel", "sms"], environment: env)
        }
        // Each of the CLI's actions on the project is in its audit log, by the operating-system user; the chain holds.
        let entries = try await ServiceProcess.command(["audit", "list", "--id", "cli-proj"], environment: env)
            .split(separator: "\n").map { try JSONParser.parse(Array($0.utf8)) }
        #expect(
            entries.compactMap { $0["action"]?.stringValue }
                == ["projects.create", "apps.create", "serviceAccounts.create", "serviceAccounts.revoke"], "\(entries)")
        #expect(entries.allSatisfy { $0["actor"]?.stringValue?.hasPrefix("cli:") == true })
        let verified = try JSONParser.parse(
            try await ServiceProcess.command(["audit", "verify", "--id", "cli-proj"], environment: env))
        #expect(verified["intact"] == true && verified["checked"]?.int64Value == 4, "\(verified)")
    }

    /// The CLI's import and export: a dry run changes nothing, a rejected row goes to the rejected file with its line,
    /// a re-run changes nothing, and the export read back into a second database exports the same lines.
    @Test func importAndExportFromTheCommandLine() async throws {
        let first = try await TestDatabase.create()
        let second = try await TestDatabase.create()
        defer {
            Task {
                await TestDatabase.drop(first)
                await TestDatabase.drop(second)
            }
        }
        let key = Base64URL.encode(try SecureRandom.bytes(32))
        for url in [first, second] {
            let env = ["DATABASE_URL": url, "SECRETS_KEY": key]
            _ = try await ServiceProcess.command(["project", "create", "--id", "move-proj", "--number", "4713"], environment: env)
            for platform in ["android", "ios"] {
                _ = try await ServiceProcess.command(
                    ["app", "create", "--project", "move-proj", "--platform", platform, "--app-id", "1:4713:\(platform):0a"],
                    environment: env)
            }
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("import-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let csv = directory.appendingPathComponent("players.csv").path
        try Data(
            """
            id,identifier,device_type,notification_types,invalid_identifier,external_user_id,tags,last_active,created_at
            p1,7abcd558f29d0b1f048083e2834ad8ea4b3d87d8ad9c088b33c132706ff445f0,0,1,f,user_1,"{""news"":""1""}",1730000000,1700000000
            p2,dQGm89TZQXiTvLsRIj_GBo:APA91bexample,1,-2,t,,{},1729000000,1700000000
            p3,not-a-token,0,1,f,,{},1729000000,1700000000

            """.utf8
        ).write(to: URL(fileURLWithPath: csv))
        let env = ["DATABASE_URL": first, "SECRETS_KEY": key]
        let dry = try JSONParser.parse(
            try await ServiceProcess.command(
                ["import", "--project", "move-proj", "--format", "onesignal-csv", csv, "--dry-run"], environment: env))
        #expect(dry["installationsCreated"]?.int64Value == 2 && dry["dryRun"] == true, "\(dry)")
        let empty = try await ServiceProcess.command(["export", "--project", "move-proj"], environment: env)
        #expect(empty.split(separator: "\n").count == 1, "a dry run wrote: \(empty)")
        let done = try JSONParser.parse(
            try await ServiceProcess.command(
                ["import", "--project", "move-proj", "--format", "onesignal-csv", csv], environment: env))
        #expect(done["installationsCreated"]?.int64Value == 2 && done["rejected"]?.int64Value == 1, "\(done)")
        let rejected = try String(contentsOfFile: csv + ".rejected.jsonl", encoding: .utf8)
        #expect(rejected.contains("\"line\":4"), "\(rejected)")
        let again = try JSONParser.parse(
            try await ServiceProcess.command(
                ["import", "--project", "move-proj", "--format", "onesignal-csv", csv], environment: env))
        #expect(again["installationsCreated"]?.int64Value == 0 && again["registrationsWritten"]?.int64Value == 0)
        let exported = try await ServiceProcess.command(["export", "--project", "move-proj"], environment: env)
        let file = directory.appendingPathComponent("export.jsonl").path
        try Data(exported.utf8).write(to: URL(fileURLWithPath: file))
        _ = try await ServiceProcess.command(
            ["import", "--project", "move-proj", "--format", "registry", file],
            environment: ["DATABASE_URL": second, "SECRETS_KEY": key])
        let reexported = try await ServiceProcess.command(
            ["export", "--project", "move-proj"], environment: ["DATABASE_URL": second, "SECRETS_KEY": key])
        #expect(reexported == exported)
        #expect(exported.split(separator: "\n").count == 3)
    }

    /// A start-up failure is one line on standard error and a non-zero exit, never a Foundation error's dump: no
    /// master key and nowhere to keep one (exit 2, naming SECRETS_KEY), a database that does not answer, a URL that is
    /// not one.
    @Test func startUpFailuresAreOneClearLine() async throws {
        let url = try await TestDatabase.create()
        defer { Task { await TestDatabase.drop(url) } }
        func start(_ env: [String: String], in directory: String) async throws -> (code: Int, errors: [String]) {
            let assignments = env.map { "\($0.key)='\($0.value)'" }.joined(separator: " ")
            let output = try await shell(
                "cd '\(directory)' && env -u SECRETS_KEY -u SECRETS_KEY_FILE -u DATABASE_URL \(assignments) PORT=0 "
                    + "'\(ServiceProcess.binary)' serve 2>&1; echo \"exit=$?\"")
            let lines = output.split(separator: "\n").map(String.init)
            let code = Int(lines.last { $0.hasPrefix("exit=") }?.dropFirst(5) ?? "") ?? -1
            #expect(!output.contains("Error Domain"), "\(output.suffix(400))")
            return (code, lines.filter { $0.hasPrefix("error:") })
        }
        // /proc/self has no room for ./.data, as a read-only image has none.
        let keyless = try await start(["DATABASE_URL": url], in: "/proc/self")
        #expect(keyless.code == 2 && keyless.errors.count == 1, "\(keyless)")
        #expect(keyless.errors.first?.contains("SECRETS_KEY") == true && keyless.errors.first?.contains("SECRETS_KEY_FILE") == true)
        let key = ["SECRETS_KEY": Base64URL.encode(try SecureRandom.bytes(32))]
        let unreachable = try await start(
            key.merging(["DATABASE_URL": "host=127.0.0.1 port=1 dbname=x connect_timeout=2"]) { a, _ in a }, in: "/tmp")
        #expect(unreachable.code != 0 && unreachable.errors.count == 1, "\(unreachable)")
        let malformed = try await start(key.merging(["DATABASE_URL": "postgresql://[::1"]) { a, _ in a }, in: "/tmp")
        #expect(malformed.code != 0 && malformed.errors.count == 1, "\(malformed)")
        let missingFile = try await start(key.merging(["DATABASE_URL_FILE": "/nonexistent/url"]) { a, _ in a }, in: "/tmp")
        #expect(missingFile.code == 2 && missingFile.errors.first?.contains("DATABASE_URL_FILE") == true, "\(missingFile)")
    }

    @Test func aReplicaWithAnotherMasterKeyRefusesToStart() async throws {
        let url = try await TestDatabase.create()
        defer { Task { await TestDatabase.drop(url) } }
        let keyA = Base64URL.encode(try SecureRandom.bytes(32))
        let keyB = Base64URL.encode(try SecureRandom.bytes(32))
        _ = try await ServiceProcess.command(
            ["project", "create", "--id", "key-proj", "--number", "4712"],
            environment: ["DATABASE_URL": url, "SECRETS_KEY": keyA])
        let service = try ServiceProcess(environment: ["DATABASE_URL": url, "SECRETS_KEY": keyB])
        #expect(try await service.waitForExit() != 0)
        #expect(service.log.contains("SECRETS_KEY"), "\(service.log.suffix(500))")
        // The right key starts, and the CLI manages keys and server keys with it.
        let env = ["DATABASE_URL": url, "SECRETS_KEY": keyA]
        let rotated = try JSONParser.parse(
            try await ServiceProcess.command(
                ["project", "rotate-server-key", "--id", "key-proj", "--keep-old-for", "1h"], environment: env))
        #expect(rotated["serverKey"]?.stringValue?.hasPrefix("trs_") == true)
        let revoked = try JSONParser.parse(
            try await ServiceProcess.command(["project", "revoke-server-key", "--id", "key-proj"], environment: env))
        #expect(revoked["revoked"]?.int64Value == 1)
        let kid = try JSONParser.parse(try await ServiceProcess.command(["keys", "rotate"], environment: env))["kid"]?
            .stringValue
        let retired = try JSONParser.parse(
            try await ServiceProcess.command(["keys", "retire", "--kid", kid ?? ""], environment: env))
        #expect(retired["retired"] == .bool(true))
        await #expect(throws: (any Error).self) {
            try await ServiceProcess.command(
                ["project", "rotate-server-key", "--id", "key-proj", "--keep-old-for", "soon"], environment: env)
        }
    }

    /// `HOST=::1` listens on IPv6 loopback only: the service is ready there, and `token-registry probe` finds it
    /// from the same `HOST`, while a probe of IPv4 loopback is refused (so the probe did not pass by luck).
    @Test func anIPv6ListenAddressServesAndTheProbeFollowsIt() async throws {
        let url = try await TestDatabase.create()
        defer { Task { await TestDatabase.drop(url) } }
        let service = try ServiceProcess(environment: ["DATABASE_URL": url, "HOST": "::1"])
        try await service.waitForReadiness()
        #expect(service.log.contains(#""host":"::1""#))
        let probe = ["probe", "--path", "/readyz", "--port", String(service.port)]
        _ = try await ServiceProcess.command(probe, environment: ["HOST": "::1"])
        _ = try await ServiceProcess.command(probe + ["--host", "[::1]"], environment: [:])
        await #expect(throws: ShellError.self) {
            try await ServiceProcess.command(probe, environment: ["HOST": "0.0.0.0"])
        }
        service.signal(SIGTERM)
        #expect(try await service.waitForExit() == 0)
    }

    @Test func invalidConfigurationStopsStartUpNamingTheVariable() async throws {
        let service = try ServiceProcess(environment: ["DATABASE_URL": "host=/nonexistent", "MAX_BODY_BYTES": "lots"])
        #expect(try await service.waitForExit() == 2)
        #expect(service.log.contains("MAX_BODY_BYTES"))
        let badHost = try ServiceProcess(environment: ["DATABASE_URL": "host=/nonexistent", "HOST": "999.1.1.1"])
        #expect(try await badHost.waitForExit() == 2)
        #expect(badHost.log.contains("HOST must be an IP address"))
    }
}
