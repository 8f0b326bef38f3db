import Testing

@testable import Registry

/// Conditions that require no topic read a project's registrations: at most two such pages of one project run at
/// once on a replica. The slots are held here as two running scans would hold them, so the third is refused however
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
            #expect(targeting.scans.enter(f.project.id) && targeting.scans.enter(f.project.id))
            for condition in [either, negated] {
                let refused = await #expect(throws: RegistryError.self) {
                    _ = try await targeting.resolve(projectID: f.project.id, condition: condition, after: nil, limit: 10)
                }
                #expect(refused?.kind == .resourceExhausted)
            }
            // A condition with a topic every target has reads that topic's members: not limited.
            _ = try await targeting.resolve(projectID: f.project.id, condition: anded, after: nil, limit: 10)
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
