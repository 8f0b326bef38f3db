import API
import JSON
import Testing
import TokenRegistryTesting

/// The consent ledger: who, when, how, under which policy, and what it was before.
@Suite("Consent ledger")
struct ConsentTests {
    @Test func grantWithdrawGrantIsKeptInOrder() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation()
            let path = "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent"
            let auth = ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"]
            for (granted, version) in [(true, "v1"), (false, "v1"), (true, "v2")] {
                let r = try await s.request(
                    "PUT", path, headers: auth,
                    json: ["autoInitEnabled": .bool(granted), "policyVersion": .string(version), "source": "settings"])
                #expect(r.status == 200, "\(r)")
                #expect(r.json?["autoInitEnabled"]?.boolValue == granted)
            }
            let history = try #require(
                try await s.request("GET", path + "?view=history", headers: auth).json?["history"]?.arrayValue)
            #expect(history.map { $0["autoInitEnabled"]?.boolValue } == [true, true, false, true])
            #expect(history.map { $0["previous"] } == [.null, .bool(true), .bool(true), .bool(false)])
            #expect(
                history.map { $0["actor"]?.stringValue } == ["default", "installation", "installation", "installation"])
            #expect(history.last?["policyVersion"]?.stringValue == "v2")
            let current = try #require(try await s.request("GET", path, headers: auth).json)
            #expect(current["consents"]?.arrayValue?.first?["autoInitEnabled"]?.boolValue == true)
        }
    }

    /// A subject export writes the ledger a page at a time: every one of 2,100 statements is in the document, in
    /// order, and the document is one JSON value.
    @Test func anExportHoldsAWholeLedgerWrittenInPages() async throws {
        try await InProcessService.with(configure: { $0.consentRatePerHour = 0 }) { s in
            let i = try await s.createInstallation()
            let path = "/v1/projects/\(s.project.id)/installations/\(i.fid)"
            let auth = ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"]
            for n in 0..<2100 {
                let r = try await s.request(
                    "PUT", path + "/consent", headers: auth, json: ["autoInitEnabled": .bool(n.isMultiple(of: 2))])
                #expect(r.status == 200)
            }
            let export = try await s.request("GET", path + ":export", headers: s.serverHeaders)
            #expect(export.status == 200)
            let item = try #require(export.json?["installations"]?.arrayValue?.first)
            let ledger = try #require(item["consentLedger"]?.arrayValue)
            #expect(ledger.count == 2101)
            #expect(ledger.dropFirst().map { $0["granted"]?.boolValue } == (0..<2100).map { $0.isMultiple(of: 2) })
            #expect(item["events"]?.arrayValue?.isEmpty == false)
            #expect(item["consents"]?.arrayValue?.count == 1 && item["fid"]?.stringValue == i.fid)
            // The ledger view pages it: 1,000, 1,000, 101, each after the last.
            var seen: [JSONValue] = []
            var token: String?
            repeat {
                let page = try #require(
                    try await s.request(
                        "GET", path + "/consent?view=history" + (token.map { "&pageToken=\($0)" } ?? ""), headers: auth
                    ).json)
                seen += page["history"]?.arrayValue ?? []
                token = page["nextPageToken"]?.stringValue
            } while token != nil && seen.count < 5000
            #expect(seen.count == 2101)
            #expect(seen.map { $0["sequence"]?.int64Value.map(String.init) } == ledger.map { $0["sequence"]?.stringValue })
        }
    }

    /// Statements are limited per installation (`RATE_LIMIT_CONSENT_PER_HOUR`): past the burst the answer is 429 with
    /// `Retry-After` and nothing is written; another installation of the project, and the same one's reads, go on.
    @Test func statementsAreLimitedPerInstallation() async throws {
        try await InProcessService.with(configure: { $0.consentRatePerHour = 60 }) { s in
            let (first, second) = (try await s.createInstallation(), try await s.createInstallation())
            func put(_ i: CreatedInstallationReply, _ granted: Bool) async throws -> Reply {
                try await s.request(
                    "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent",
                    headers: ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"],
                    json: ["autoInitEnabled": .bool(granted)])
            }
            let burst = Int(Configuration.consentBurst)
            for n in 0..<burst {
                let r = try await put(first, n.isMultiple(of: 2))
                #expect(r.status == 200, "\(n): \(r)")
            }
            let refused = try await put(first, true)
            #expect(refused.status == 429 && refused.errorStatus == "RESOURCE_EXHAUSTED", "\(refused)")
            #expect(refused.header("retry-after").flatMap(Int.init).map { (1...60).contains($0) } == true)
            #expect(try await put(second, false).status == 200)
            let history = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/installations/\(first.fid)/consent?view=history",
                headers: s.serverHeaders)
            #expect(history.json?["history"]?.arrayValue?.count == burst + 1)
        }
    }

    @Test func consentFirstAppsStartOptedOut() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation(app: s.consentFirst)
            let current = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent", headers: s.serverHeaders)
            #expect(current.json?["consents"]?.arrayValue?.first?["autoInitEnabled"]?.boolValue == false)
            #expect(current.json?["consents"]?.arrayValue?.first?["actor"]?.stringValue == "default")
        }
    }

    @Test func serverKeyRecordsAsServerAndOtherPurposesAreSeparate() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation()
            let path = "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent"
            let r = try await s.request(
                "PUT", path, headers: s.serverHeaders,
                json: ["autoInitEnabled": false, "purpose": "analytics", "source": "crm-import"])
            #expect(r.json?["actor"]?.stringValue == "server")
            #expect(r.json?["previous"] == .null)
            let current = try #require(
                try await s.request("GET", path, headers: s.serverHeaders).json?["consents"]?.arrayValue)
            #expect(current.map { $0["purpose"]?.stringValue } == ["analytics", "messaging"])
        }
    }

    @Test func anInstallationCannotTouchAnotherInstallationsConsent() async throws {
        try await InProcessService.with { s in
            let a = try await s.createInstallation()
            let b = try await s.createInstallation()
            let r = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(b.fid)/consent",
                headers: ["x-goog-firebase-installations-auth": a.authToken], json: ["autoInitEnabled": false])
            #expect(r.status == 403)
            #expect(
                try await s.request("GET", "/v1/projects/\(s.project.id)/installations/\(b.fid)/consent").status == 401)
            #expect(
                try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/installations/\(b.fid)/consent",
                    headers: ["x-goog-firebase-installations-auth": "garbage"]
                ).status == 401)
        }
    }

    static let badBodies: [(JSONValue, String)] = [
        ([:], "autoInitEnabled"), (["autoInitEnabled": "yes"], "autoInitEnabled"),
        (["autoInitEnabled": true, "purpose": "Bad Purpose"], "purpose"),
        (["autoInitEnabled": true, "policyVersion": .string(String(repeating: "x", count: 200))], "policyVersion"),
        (["autoInitEnabled": true, "source": 5], "source"),
    ]

    @Test(arguments: badBodies)
    func invalidConsentBodiesName(_ bad: (JSONValue, String)) async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation()
            let r = try await s.request(
                "PUT", "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent", headers: s.serverHeaders,
                json: bad.0)
            #expect(r.status == 400)
            #expect(r.json?["error"]?["message"]?.stringValue?.contains(bad.1) == true, "\(r)")
        }
    }

}
