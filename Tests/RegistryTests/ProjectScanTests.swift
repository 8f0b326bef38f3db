import Testing

@testable import Registry

/// Conditions that test each target (a project's registrations, or the members of a topic they require): at most two
/// such pages of one project run at once on a replica. The slots are held here as two running scans would hold them, so the third is refused however
/// fast the store is.
@Suite("Project-wide condition scans")
struct ProjectScanTests {
    @Test(arguments: StoreKind.available)
    func aThirdScanOfAProjectIsRefusedWhileTwoRun(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let targeting = f.services.targeting
            let either = try Condition.parse("'a' in topics || 'b' in topics")
            let negated = try Condition.parse("!('a' in topics)")
            let anded = try Condition.parse("'a' in topics && !('b' in topics)")
            let usersOfATopic = try Condition.parse("'a' in topics && ('b' in topics || 'c' in topics)")
            let topicsOnly = try Condition.parse("'a' in topics && 'b' in topics")
            #expect(targeting.scans.enter(f.project.id) && targeting.scans.enter(f.project.id))
            // A condition that filters the members of a topic it requires tests each of them for as long as it
            // takes to fill the page, as a scan of the project does: a topic every installation of the project has
            // made it the same scan, unlimited (an attacker's review).
            for condition in [either, negated, anded, usersOfATopic] {
                let refused = await #expect(throws: RegistryError.self) {
                    _ = try await targeting.resolve(projectID: f.project.id, condition: condition, after: nil, limit: 10)
                }
                #expect(refused?.kind == .resourceExhausted)
            }
            // Topics every target has, and nothing else, are their indexes merged: not limited.
            _ = try await targeting.resolve(projectID: f.project.id, condition: topicsOnly, after: nil, limit: 10)
            // Another project's scans are its own.
            _ = try await targeting.resolve(projectID: "other-proj", condition: either, after: nil, limit: 10)
            targeting.scans.leave(f.project.id)
            _ = try await targeting.resolve(projectID: f.project.id, condition: either, after: nil, limit: 10)
            targeting.scans.leave(f.project.id)
            // Each scan gave its slot back.
            #expect(targeting.scans.enter(f.project.id) && targeting.scans.enter(f.project.id))
            #expect(!targeting.scans.enter(f.project.id))
        }
    }
}
