import JSON
import Testing
import TokenRegistryTesting

/// The consent ledger: who, when, how, under which policy, and what it was before.
@Suite("Consent ledger, on the wire", .enabled(if: TestDatabase.isAvailable))
struct ConsentTestsLive {
    @Test func unknownViewIsRejectedAndLedgerIsAppendOnly() async throws {
        try await TestService.with { s in
            let i = try await s.createInstallation()
            #expect(
                try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent?view=all",
                    headers: s.serverHeaders
                ).status == 400)
            do {
                try await s.pool.query("UPDATE consent_events SET granted = NOT granted")
                Issue.record("the ledger accepted an update")
            } catch {}
        }
    }
}
