import Foundation
import JSON
import Registry
import Testing

/// Imports on both stores: the refresh rules, idempotence, resumption, a dry run, and the export's round trip.
@Suite("Imports")
struct ImportTests {
    /// Rows from memory; with `failAfter`, the source breaks after that many rows (a killed import).
    struct Rows: ImportReader {
        var rows: [ImportRow]
        var failAfter: Int?
        var read = 0

        mutating func next() throws -> ImportRow? {
            if let failAfter, read >= failAfter { throw ImportError("the source broke") }
            guard read < rows.count else { return nil }
            read += 1
            return rows[read - 1]
        }
    }

    static func android(_ n: Int, fid: String? = nil, seen: Date, consent: Bool? = true, user: String? = nil)
        -> ImportRow
    {
        let id = fid ?? String(format: "cAAAAAAAAAAAAAAAAA%04d", n)
        var r = ImportRecord(line: n, sourceKey: "k\(n)", platform: .android)
        r.fid = id
        r.token = id + ":APA91b\(n)"
        r.messagingConsent = consent
        r.lastSeenAt = seen
        r.refreshedAt = seen
        r.consentTime = seen
        r.createdAt = seen.addingTimeInterval(-86_400)
        r.userID = user
        r.topics = [TopicSubscription(topic: "news", createdAt: seen)]
        return .record(r)
    }

    static func run(
        _ f: DomainFixture, _ rows: [ImportRow], format: ImportFormat = .fcmDjango, key: String? = "run-1",
        dryRun: Bool = false, batch: Int = 5, failAfter: Int? = nil
    ) async throws -> ImportProgress {
        var reader = Rows(rows: rows, failAfter: failAfter)
        let apps = try await f.services.catalog.apps(projectID: f.project.id)
        return try await f.services.imports.run(
            project: f.project, apps: apps + [try await android(f)], format: format, reader: &reader, key: key,
            dryRun: dryRun, batchSize: batch, bytes: { 0 }, progress: { _ in }, rejected: { _ in })
    }

    static func android(_ f: DomainFixture) async throws -> App {
        if let app = try await f.services.catalog.apps(projectID: f.project.id).first(where: { $0.platform == .android }) {
            return app
        }
        return try await f.services.catalog.createApp(
            project: f.project, platform: .android, bundleID: nil, autoInitDefault: true)
    }

    @Test(arguments: StoreKind.available)
    func aRerunChangesNothingAndTheNewerWins(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let t0 = f.clock.now().addingTimeInterval(-30 * 86_400)
            let rows = (0..<12).map { Self.android($0, seen: t0, user: $0 < 3 ? "u\($0)" : nil) }
            let first = try await Self.run(f, rows)
            #expect(first.imported == 12 && first.counts.installationsCreated == 12)
            #expect(first.counts.registrationsWritten == 12 && first.counts.topicsAdded == 12)
            #expect(first.counts.usersBound == 3 && first.counts.consentChanges == 12)
            let again = try await Self.run(f, rows, key: "run-2")
            #expect(again.counts == ImportCounts(), "\(again.counts)")
            // Newer rows win, older ones change nothing.
            let newer = Self.android(0, seen: t0.addingTimeInterval(3600), consent: false)
            let older = Self.android(1, seen: t0.addingTimeInterval(-3600), consent: false)
            let merged = try await Self.run(f, [newer, older], key: "run-3")
            #expect(merged.counts.installationsUpdated == 1 && merged.counts.consentChanges == 1)
            let fid0 = "cAAAAAAAAAAAAAAAAA0000"
            let installation = try #require(try await f.services.installations.find(project: f.project, fid: fid0))
            let ledger = try await f.services.consent.history(installation: installation)
            #expect(ledger.map(\.granted) == [true, false] && ledger.allSatisfy { $0.source == "import:fcm-django" })
            // The consent gate holds for imports: no registration is active without consent.
            #expect(try await f.services.registrations.find(project: f.project, tokenOrFID: fid0)?.state == .disabled)
            let one = try #require(try await f.services.installations.find(project: f.project, fid: "cAAAAAAAAAAAAAAAAA0001"))
            #expect(try await f.services.consent.messagingEnabled(installation: one))
            #expect(try await f.members("news").count == 11)
            #expect(try await f.services.users.bindings(project: f.project, userID: "u1").map(\.fid) == [one.fid])
        }
    }

    @Test(arguments: StoreKind.available)
    func aDeletedInstallationNeverComesBack(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let seen = f.clock.now()
            _ = try await Self.run(f, [Self.android(1, seen: seen)])
            let fid = "cAAAAAAAAAAAAAAAAA0001"
            let installation = try #require(try await f.services.installations.find(project: f.project, fid: fid))
            #expect(try await f.delete(installation, reason: .server))
            let again = try await Self.run(f, [Self.android(1, seen: seen.addingTimeInterval(60))], key: "run-2")
            #expect(again.counts.deletedSkipped == 1 && again.counts.installationsCreated == 0)
            #expect(try await f.services.installations.find(project: f.project, fid: fid) == nil)
        }
    }

    @Test(arguments: StoreKind.available)
    func aDryRunCountsAndChangesNothing(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let dry = try await Self.run(f, (0..<7).map { Self.android($0, seen: f.clock.now()) }, dryRun: true)
            #expect(dry.counts.installationsCreated == 7 && dry.counts.registrationsWritten == 7)
            #expect(try await f.services.installations.find(project: f.project, fid: "cAAAAAAAAAAAAAAAAA0001") == nil)
            #expect(try await f.members("news").isEmpty)
        }
    }

    /// A run killed after two committed batches starts again after them.
    @Test(arguments: StoreKind.available)
    func aKilledImportResumesAfterItsLastCommittedBatch(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let rows = (0..<12).map { Self.android($0, seen: f.clock.now()) }
            await #expect(throws: ImportError.self) { _ = try await Self.run(f, rows, failAfter: 11) }
            #expect(try await f.members("news").count == 10)
            let resumed = try await Self.run(f, rows)
            #expect(resumed.rows == 12 && resumed.imported == 2 && resumed.counts.installationsCreated == 2)
            #expect(try await f.members("news").count == 12)
        }
    }

    /// Export, import into an empty store (its apps made with the same IDs), export again: the same lines.
    @Test(arguments: StoreKind.available)
    func theExportRoundTrips(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { a in
            let i = try await a.installation()
            try await a.consent(i, false)
            try await a.consent(i, true)
            _ = try await a.register(i)
            _ = try await a.services.topics.subscribe(project: a.project, fid: i.fid, topic: "news")
            _ = try await a.services.registrations.senderToken(installation: i, sender: "987", scope: "*")
            _ = try await a.services.users.bind(project: a.project, fid: i.fid, userID: "round-trip")
            _ = try await a.installation(a.optedOut)
            _ = try await Self.run(a, [Self.android(3, seen: a.clock.now(), user: "u3")], format: .pinpoint)
            // One installation whose ledger is longer than a page of its page's read (and than a page of its own): its
            // line is written in pieces, and reads back whole.
            let talkative = try await a.installation()
            let statements = ImportService.ledgerInline + ImportService.ledgerPage + 68
            for n in 0..<statements { try await a.consent(talkative, n.isMultiple(of: 2)) }
            let first = [RegistryExportFormat.header(projectID: a.project.id).text] + (try await Self.lines(of: a))
            #expect(first.count == 5)
            let long = try #require(first.compactMap { try? JSONParser.parse($0) }.first { $0["fid"]?.stringValue == talkative.fid })
            #expect(long["consentLedger"]?.arrayValue?.count == statements + 1)
            #expect(long["consentLedger"]?.arrayValue?.last?["granted"]?.boolValue == false)
            let apps = try await a.services.catalog.apps(projectID: a.project.id)
            try await DomainFixture.with(kind) { b in
                for app in apps where try await b.services.catalog.app(id: app.id) == nil {
                    _ = try await b.services.catalog.createApp(
                        project: b.project, platform: app.platform, bundleID: app.bundleID,
                        autoInitDefault: app.autoInitDefault, appID: app.id)
                }
                let rows = try first.map { line in
                    try ImportFormatTests.rows(.registry, line).first ?? .skipped
                }
                let imported = try await Self.run(b, rows, format: .registry, key: nil)
                #expect(imported.imported == 4, "\(imported)")
                let second = [RegistryExportFormat.header(projectID: b.project.id).text] + (try await Self.lines(of: b))
                #expect(second == first)
            }
        }
    }

    /// Every string a registry-format line carries, at its path in the line.
    static let stringPaths: [[String]] = [
        ["sdkVersion"], ["importedFrom"], ["registration", "token"], ["registration", "apnsToken"],
        ["registration", "bundleId"], ["registration", "appVersion"], ["registration", "sdkVersion"],
        ["registration", "webPush", "endpoint"], ["registration", "webPush", "auth"],
        ["registration", "webPush", "p256dh"], ["registration", "webPush", "applicationPubKey"],
        ["registration", "webPush", "origin"], ["registration", "retirement", "reason"],
        ["registration", "quarantine", "reason"], ["consents", "0", "source"], ["consents", "0", "policyVersion"],
        ["consentLedger", "0", "source"], ["consentLedger", "0", "policyVersion"], ["senderTokens", "0", "sender"],
        ["senderTokens", "0", "scope"], ["senderTokens", "0", "token"], ["user", "userId"], ["topics", "0", "topic"],
    ]

    /// A line of the registry's own export with every optional part present.
    static func fullLine(fid: String, appID: String) -> JSONValue {
        let t = "2024-01-01T00:00:00Z"
        let token: JSONValue = .string(fid + ":APA91bfull")
        return [
            "fid": .string(fid), "appId": .string(appID), "createTime": .string(t), "lastSeenTime": .string(t),
            "sdkVersion": "a:19.0.0", "importedFrom": "sns",
            "registration": [
                "token": token, "platform": "android", "state": "active", "createTime": .string(t),
                "refreshTime": .string(t), "apnsToken": "abcdef01", "bundleId": "com.example", "appVersion": "1.0",
                "sdkVersion": "a:19.0.0",
                "webPush": [
                    "endpoint": "https://push.example/x", "auth": "YXV0aA", "p256dh": "cDI1NmRo",
                    "applicationPubKey": "a2V5", "origin": "https://app.example",
                ],
                "retirement": ["reason": "UNREGISTERED", "channel": "fcm", "time": .string(t)],
                "quarantine": ["reason": "UNAVAILABLE", "channel": "fcm", "time": .string(t)],
            ],
            "consents": [
                [
                    "purpose": "messaging", "granted": true, "actor": "server", "updateTime": .string(t),
                    "source": "crm", "policyVersion": "v1",
                ]
            ],
            "consentLedger": [
                [
                    "purpose": "messaging", "granted": true, "actor": "server", "recordTime": .string(t),
                    "source": "crm", "policyVersion": "v1",
                ]
            ],
            "senderTokens": [["sender": "987", "scope": "*", "token": .string(fid + ":APA91bsender")]],
            "user": ["userId": "someone"], "topics": [["topic": "news", "createTime": .string(t)]],
        ]
    }

    static func setting(_ value: JSONValue, at path: ArraySlice<String>, in line: JSONValue) -> JSONValue {
        guard let key = path.first else { return value }
        switch line {
        case let .array(items):
            var items = items
            let i = Int(key)!
            items[i] = setting(value, at: path.dropFirst(), in: items[i])
            return .array(items)
        case let .object(members):
            return .object(members.map { $0.0 == key ? ($0.0, setting(value, at: path.dropFirst(), in: $0.1)) : $0 })
        default: return line
        }
    }

    /// The strings of a registry-format line that may be empty (optional facts); every other one must not.
    static let mayBeEmpty: Set<[String]> = [
        ["sdkVersion"], ["importedFrom"], ["registration", "bundleId"], ["registration", "appVersion"],
        ["registration", "sdkVersion"], ["registration", "webPush", "applicationPubKey"],
        ["registration", "webPush", "origin"], ["registration", "retirement", "reason"],
        ["registration", "quarantine", "reason"], ["consents", "0", "source"], ["consents", "0", "policyVersion"],
        ["consentLedger", "0", "source"], ["consentLedger", "0", "policyVersion"],
    ]

    /// Every string of a registry-format line, in turn, with what the API refuses (a NUL, a control character, 3,000
    /// random characters, and an empty string where the field is required): each such line is a rejection, never a
    /// batch the store refuses, and the import goes on to the valid line after each; the outcome of every line is
    /// known beforehand. (A store's refusal failed the run, and a resumed run failed on the same row again.) A line
    /// with every field at the API's limits (an http endpoint, a 64-byte version, a 255-byte bundle ID, a 2,048-byte
    /// token) is imported.
    @Test(arguments: StoreKind.available)
    func everyFieldOfARecordIsCheckedAsTheAPIChecksIt(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let app = try await Self.android(f)
            var random = SystemRandomNumberGenerator()
            let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:.")
            let long = String((0..<3000).map { _ in alphabet.randomElement(using: &random)! })
            var lines: [String] = []
            var refused: Set<Int> = []
            var valid: [String] = []
            var n = 0
            func fid() -> String { n += 1; return String(format: "cBBBBBBBBBBBBBBBBB%04d", n) }
            for path in Self.stringPaths {
                for value in ["a\u{0}b", "a\u{1}b", long, ""] {
                    let line = Self.setting(.string(value), at: path[...], in: Self.fullLine(fid: fid(), appID: app.id))
                    lines.append(line.text)
                    // The route takes any key without NUL (the JS SDK's own); every other string is printable.
                    let allowed =
                        (value.isEmpty && Self.mayBeEmpty.contains(path))
                        || (value == "a\u{1}b" && path == ["registration", "webPush", "applicationPubKey"])
                    if !allowed { refused.insert(lines.count) }
                    let good = fid()
                    valid.append(good)
                    lines.append(Self.fullLine(fid: good, appID: app.id).text)
                }
            }
            // Every field at the API's limits.
            let edge = fid()
            valid.append(edge)
            var atLimits = Self.fullLine(fid: edge, appID: app.id)
            for (path, value) in [
                (["sdkVersion"], String(repeating: "v", count: 64)),
                (["registration", "appVersion"], String(repeating: "9", count: 64)),
                (["registration", "bundleId"], String(repeating: "b", count: 255)),
                (["registration", "token"], edge + ":" + String(repeating: "t", count: 2048 - edge.utf8.count - 1)),
                (["registration", "apnsToken"], String(repeating: "AB", count: 100)),
                (["registration", "webPush", "endpoint"], "http://push.example/" + String(repeating: "e", count: 2028)),
                (["registration", "webPush", "applicationPubKey"], String(repeating: "k", count: 255) + "="),
                (["senderTokens", "0", "sender"], String(repeating: "s", count: 256)),
                (["user", "userId"], String(repeating: "\u{E9}", count: 128)),
            ] {
                atLimits = Self.setting(.string(value), at: path[...], in: atLimits)
            }
            lines.append(atLimits.text)
            var rejected: [ImportRejection] = []
            var reader = Rows(rows: try ImportFormatTests.rows(.registry, lines.joined(separator: "\n")))
            let progress = try await f.services.imports.run(
                project: f.project, apps: [app], format: .registry, reader: &reader, key: "hostile", dryRun: false,
                batchSize: 7, bytes: { 0 }, progress: { _ in }, rejected: { rejected.append($0) })
            #expect(Set(rejected.map(\.line)) == refused, "\(rejected.prefix(5))")
            #expect(progress.rejected == refused.count && progress.imported == lines.count - refused.count)
            for good in valid {
                #expect(try await f.services.installations.find(project: f.project, fid: good) != nil, "\(good)")
            }
            let stored = try #require(try await f.services.registrations.find(project: f.project, tokenOrFID: edge))
            #expect(stored.apnsToken == String(repeating: "ab", count: 100))
            #expect(stored.web?.endpoint.hasPrefix("http://") == true)
        }
    }

    /// A third-party source's optional facts that this registry would not take (an app version of 100 bytes, an SDK
    /// version with a control character) are left out; the device and its token are imported.
    @Test(arguments: StoreKind.available)
    func aSourcesUnfitFactsAreLeftOutNotTheDevice(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            guard case var .record(r) = Self.android(1, seen: f.clock.now()) else { return }
            r.appVersion = String(repeating: "1", count: 100)
            r.sdkVersion = "a\u{7}b"
            r.bundleID = "com.example.app"
            let progress = try await Self.run(f, [.record(r)], format: .pinpoint)
            #expect(progress.imported == 1 && progress.rejected == 0)
            let stored = try #require(try await f.services.registrations.find(project: f.project, tokenOrFID: r.fid!))
            #expect(stored.appVersion == nil && stored.bundleID == "com.example.app")
            #expect(try await f.services.installations.find(project: f.project, fid: r.fid!)?.sdkVersion == nil)
        }
    }

    /// The project's export as lines: the bytes `export` writes, cut at each newline.
    static func lines(of f: DomainFixture) async throws -> [String] {
        var bytes: [UInt8] = []
        try await f.services.imports.export(project: f.project) { bytes += $0 }
        #expect(bytes.last == 10)
        return bytes.split(separator: 10).map { String(decoding: $0, as: UTF8.self) }
    }
}
