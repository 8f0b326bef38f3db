import API
import Foundation
import JSON
import Registry
import RegistryPostgres

/// The administrative commands: migrations, projects, apps, signing keys.
enum Admin {
    static func migrate(_ arguments: Arguments) async throws -> Int32 {
        if arguments.wantsHelp {
            print(
                "token-registry migrate — apply pending database migrations (safe to run from several replicas at once)."
            )
            return 0
        }
        try arguments.allow([])
        let applied = try await CommandDatabase.with(try Configuration.fromEnvironment()) { try await $0.migrate() }
        printJSON(["applied": .array(applied.map { .int($0) }), "latest": .int(Schema.migrations.last?.version ?? 0)])
        return 0
    }

    /// Runs `body` with a migrated database and an application built on it (no HTTP listener).
    static func withApplication<T>(clock: any WallClock = SystemClock(), _ body: (Application) async throws -> T)
        async throws -> T
    {
        let configuration = try Configuration.fromEnvironment()
        return try await CommandDatabase.with(configuration) { database in
            try await database.migrate()
            let app = try await database.application(
                configuration: configuration, clock: clock, logger: Logger(level: .error))
            defer { app.services.health.close() }
            return try await body(app)
        }
    }

    static let projectUsage = """
        token-registry project create --id <projectId> --number <projectNumber>
          Creates a project and prints {"projectId","projectNumber","serverKey"}. The server key is shown once.
        token-registry project rotate-server-key --id <id|number> [--keep-old-for <duration>]
          Prints a new server key; the project's older keys keep working for the duration (default 24h; 0s ends
          them now). Durations: 90s, 30m, 24h, 7d.
        token-registry project revoke-server-key --id <id|number> [--all]
          Revokes every server key of the project but the newest (with --all, that one too). Replicas stop
          accepting a revoked key within 30 seconds.
        """

    static func project(_ arguments: Arguments) async throws -> Int32 {
        guard !arguments.wantsHelp, let verb = arguments.words.first else {
            print(projectUsage)
            return arguments.wantsHelp ? 0 : 2
        }
        switch verb {
        case "create":
            try arguments.allow(["id", "number"])
            let id = try arguments.required("id")
            guard let number = Int64(try arguments.required("number")) else {
                throw CLIError("--number must be a number")
            }
            return try await withApplication { app in
                let key = try await app.catalog.createProject(id: id, number: number)
                // The key is shown first: it exists now, and an entry that cannot be written must not lose it.
                printJSON([
                    "projectId": .string(id), "projectNumber": .string(String(number)), "serverKey": .string(key),
                    "serverKeyFingerprint": .string(Authenticator.actor(serverKey: key)),
                ])
                try await AuditCommand.record(app, projectID: id, action: "projects.create", target: .resource("project"))
                return 0
            }
        case "rotate-server-key":
            try arguments.allow(["id", "keep-old-for"])
            let keep = try duration(arguments.options["keep-old-for"] ?? "24h", option: "keep-old-for")
            return try await withProject(arguments) { app, project in
                let now = Date()
                let key = try await app.catalog.rotateServerKey(project: project, keepOldFor: keep, at: now)
                printJSON([
                    "projectId": .string(project.id), "serverKey": .string(key),
                    "serverKeyFingerprint": .string(Authenticator.actor(serverKey: key)),
                    "oldKeysValidUntil": .string(Timestamp.rfc3339(now.addingTimeInterval(keep))),
                ])
                try await AuditCommand.record(
                    app, projectID: project.id, action: "serverKeys.rotate", target: .resource("serverKeys"))
                return 0
            }
        case "revoke-server-key":
            try arguments.allow(["id"])
            return try await withProject(arguments) { app, project in
                let revoked = try await app.catalog.revokeServerKeys(
                    project: project, all: arguments.flags.contains("all"), at: Date())
                try await AuditCommand.record(
                    app, projectID: project.id, action: "serverKeys.revoke", target: .resource("serverKeys"))
                printJSON(["projectId": .string(project.id), "revoked": .int(Int64(revoked))])
                return 0
            }
        default:
            print(projectUsage)
            return 2
        }
    }

    static func withProject(
        _ arguments: Arguments, _ body: (Application, Project) async throws -> Int32
    ) async throws -> Int32 {
        let reference = try arguments.required("id")
        return try await withApplication { app in
            guard let project = try await app.catalog.project(reference) else {
                throw CLIError("no project \(reference)")
            }
            return try await body(app, project)
        }
    }

    /// `90s`, `30m`, `24h`, `7d` (or a bare number of seconds) in seconds.
    static func duration(_ text: String, option: String) throws -> TimeInterval {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        let unit = text.last.flatMap { units[$0] }
        let number = Double(unit == nil ? text : String(text.dropLast()))
        guard let number, number >= 0, number <= 3650 * 86_400 / (unit ?? 1) else {
            throw CLIError("--\(option) must be a duration such as 90s, 30m, 24h or 7d")
        }
        return number * (unit ?? 1)
    }

    static func app(_ arguments: Arguments) async throws -> Int32 {
        guard arguments.words.first == "create", !arguments.wantsHelp else {
            print(
                """
                token-registry app create --project <id|number> --platform ios|android|web [--bundle-id <id>]
                                          [--auto-init-default true|false] [--app-id <1:number:platform:hex>]
                                          [--api-key <AIza…>] [--web-origin <https://a.example>]…
                  Creates an app and prints {"appId","apiKey",…}.
                  --auto-init-default false  new installations start opted out of messaging.
                  --app-id, --api-key        register the app under the identifiers its Firebase configuration
                                             (GoogleService-Info.plist, google-services.json, web config) already carries.
                  --web-origin               an origin browsers may call from (repeatable); default: any origin.
                """)
            return arguments.wantsHelp ? 0 : 2
        }
        try arguments.allow([
            "project", "platform", "bundle-id", "auto-init-default", "app-id", "api-key", "web-origin",
        ])
        let reference = try arguments.required("project")
        guard let platform = Platform(rawValue: try arguments.required("platform")) else {
            throw CLIError("--platform must be ios, android or web")
        }
        var autoInit = true
        if let text = arguments.options["auto-init-default"] {
            guard let value = Bool(text) else { throw CLIError("--auto-init-default must be true or false") }
            autoInit = value
        }
        return try await withApplication { app in
            guard let project = try await app.catalog.project(reference) else {
                throw CLIError("no project \(reference)")
            }
            let created = try await app.catalog.createApp(
                project: project, platform: platform, bundleID: arguments.options["bundle-id"],
                autoInitDefault: autoInit, appID: arguments.options["app-id"], apiKey: arguments.options["api-key"],
                webOrigins: arguments.repeated["web-origin"] ?? [])
            try await AuditCommand.record(
                app, projectID: project.id, action: "apps.create", target: .resource("apps/" + created.id))
            printJSON([
                "appId": .string(created.id), "apiKey": .string(created.apiKey), "projectId": .string(project.id),
                "platform": .string(platform.rawValue), "autoInitDefault": .bool(autoInit),
                "webOrigins": .array(created.webOrigins.map { .string($0) }),
            ])
            return 0
        }
    }

    static func keys(_ arguments: Arguments) async throws -> Int32 {
        switch (arguments.words.first, arguments.wantsHelp) {
        case ("rotate"?, false):
            try arguments.allow([])
            return try await withApplication { app in
                let kid = try await app.tokens.rotate()
                try await AuditCommand.record(
                    app, projectID: AuditCommand.deploymentChain, action: "signingKeys.rotate",
                    target: .resource("signingKeys/" + kid))
                printJSON(["kid": .string(kid)])
                return 0
            }
        case ("retire"?, false):
            try arguments.allow(["kid"])
            let kid = try arguments.required("kid")
            return try await withApplication { app in
                guard try await app.tokens.retire(kid: kid) else {
                    throw CLIError("no signing key \(kid) is in service")
                }
                try await AuditCommand.record(
                    app, projectID: AuditCommand.deploymentChain, action: "signingKeys.retire",
                    target: .resource("signingKeys/" + kid))
                printJSON(["kid": .string(kid), "retired": true])
                return 0
            }
        default:
            print(
                """
                token-registry keys rotate
                  Adds a new ES256 signing key for auth tokens; tokens signed by older keys keep verifying until they
                  expire. Replicas pick the new key up within a minute.
                token-registry keys retire --kid <kid>
                  Retires a signing key: it stops signing and verifying (tokens it signed stop working, within a minute
                  on every replica). The newest remaining key signs; with none left, a new one is made.
                """)
            return arguments.wantsHelp ? 0 : 2
        }
    }
}

extension Admin {
    /// `jobs run [--now <time>]`: each job once, at the given time (so a test can live through 180 days).
    static func jobs(_ arguments: Arguments) async throws -> Int32 {
        guard arguments.words.first == "run", !arguments.wantsHelp else {
            print(
                "token-registry jobs run [--now <RFC 3339 time>] — run each background job once: deliver due deletion notices, "
                    + "purge what is due, expire idle installations, relay change-feed events. --now sets the clock the jobs see."
            )
            return arguments.wantsHelp ? 0 : 2
        }
        try arguments.allow(["now"])
        var clock: any WallClock = SystemClock()
        if let text = arguments.options["now"] {
            guard let date = Timestamp.parse(text) else {
                throw CLIError("--now must be an RFC 3339 time such as 2027-06-01T00:00:00Z")
            }
            clock = ManualClock(date)
        }
        return try await withApplication(clock: clock) { app in
            let done = try await app.jobs.runAll()
            printJSON(.object(done.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) }))
            // A run at a time of the operator's choosing can expire and purge what the real clock would not yet.
            if let text = arguments.options["now"] {
                try await AuditCommand.record(
                    app, projectID: AuditCommand.deploymentChain, action: "jobs.runAt", target: .resource("jobs/" + text))
            }
            return 0
        }
    }
}

extension Admin {
    /// `serviceaccount create|list|revoke`: credential files for the admin SDKs, and their lifecycle.
    static func serviceAccount(_ arguments: Arguments) async throws -> Int32 {
        switch arguments.wantsHelp ? nil : arguments.words.first {
        case "create": return try await createServiceAccount(arguments)
        case "list": return try await listServiceAccounts(arguments)
        case "revoke": return try await revokeServiceAccount(arguments)
        default:
            print(
                """
                token-registry serviceaccount create --project <id|number> --out <file> [--base-url <URL>]
                  Writes a service-account credential file (JSON, mode 0600; an existing file is never overwritten)
                  for the project: the admin SDKs load it as they load Google's (GOOGLE_APPLICATION_CREDENTIALS,
                  credentials.Certificate, cert()), and exchange it at <base-url>/token for an hour-long access
                  token. The private key is written once, to that file only, and not kept.
                  --base-url  where the SDKs reach this service (default http://127.0.0.1:$PORT, PORT default 8080).
                token-registry serviceaccount list --project <id|number>
                  The project's accounts: key id, client email, when made and, if so, revoked.
                token-registry serviceaccount revoke --key-id <private_key_id>
                  Refuses the account's assertions at once, and its access tokens within 30 s on every replica.
                """)
            return arguments.wantsHelp ? 0 : 2
        }
    }

    static func serviceAccountJSON(_ a: ServiceAccount) -> JSONValue {
        [
            "privateKeyId": .string(a.keyID), "clientEmail": .string(a.clientEmail), "projectId": .string(a.projectID),
            "createTime": .string(Timestamp.rfc3339(a.createdAt)),
            "revokeTime": a.revokedAt.map { .string(Timestamp.rfc3339($0)) } ?? .null,
        ]
    }

    private static func createServiceAccount(_ arguments: Arguments) async throws -> Int32 {
        try arguments.allow(["project", "base-url", "out"])
        let reference = try arguments.required("project")
        guard let out = arguments.options["out"], !out.isEmpty else {
            throw CLIError("missing --out <file>: the private key is written to a file (0600), never to the terminal")
        }
        let port = ProcessInfo.processInfo.environment["PORT"] ?? "8080"
        let base = arguments.options["base-url"] ?? "http://127.0.0.1:\(port)"
        // Created before the account is made: a path that cannot be written leaves no account behind.
        let fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw CLIError("cannot create \(out): \(String(cString: strerror(errno))) (an existing file is never overwritten)")
        }
        var written = false
        defer {
            close(fd)
            if !written { unlink(out) }
        }
        return try await withApplication { app in
            guard let project = try await app.catalog.project(reference) else {
                throw CLIError("no project \(reference)")
            }
            let file = try await app.services.serviceAccounts.create(project: project, baseURL: base)
            let bytes = file.encoded() + [UInt8(ascii: "\n")]
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n == bytes.count, fsync(fd) == 0 else { throw CLIError("cannot write \(out)") }
            written = true
            printJSON([
                "file": .string(out), "privateKeyId": file["private_key_id"] ?? .null,
                "clientEmail": file["client_email"] ?? .null, "tokenUri": file["token_uri"] ?? .null,
            ])
            try await AuditCommand.record(
                app, projectID: project.id, action: "serviceAccounts.create",
                target: .resource("serviceAccounts/" + (file["private_key_id"]?.stringValue ?? "")))
            return 0
        }
    }

    private static func listServiceAccounts(_ arguments: Arguments) async throws -> Int32 {
        try arguments.allow(["project"])
        let reference = try arguments.required("project")
        return try await withApplication { app in
            guard let project = try await app.catalog.project(reference) else {
                throw CLIError("no project \(reference)")
            }
            let accounts = try await app.services.serviceAccounts.list(projectID: project.id)
            printJSON(["serviceAccounts": .array(accounts.map(serviceAccountJSON))])
            return 0
        }
    }

    private static func revokeServiceAccount(_ arguments: Arguments) async throws -> Int32 {
        try arguments.allow(["key-id"])
        let keyID = try arguments.required("key-id")
        return try await withApplication { app in
            let account = try await app.services.serviceAccounts.account(keyID: keyID)
            guard try await app.services.serviceAccounts.revoke(keyID: keyID), let account else {
                throw CLIError("no service account in force has key id \(keyID)")
            }
            try await AuditCommand.record(
                app, projectID: account.projectID, action: "serviceAccounts.revoke",
                target: .resource("serviceAccounts/" + keyID))
            printJSON(["privateKeyId": .string(keyID), "revoked": true])
            return 0
        }
    }
}
