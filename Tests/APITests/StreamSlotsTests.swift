import Testing
import TokenRegistryTesting

@testable import API

/// Exports hold a slot of their project's for as long as their response lives: one project export a project at a
/// time on a replica, four subject exports.
@Suite("Export slots")
struct StreamSlotsTests {
    @Test func aSlotIsHeldWhileItsHolderLivesAndGivenBackAfter() {
        let slots = StreamSlots(perProject: 1)
        var held: StreamSlots.Slot? = slots.take("p")
        #expect(held != nil && slots.take("p") == nil)
        #expect(slots.take("q") != nil)  // another project's own, given back at once (not kept)
        #expect(slots.holding("q") == 0)
        held = nil
        #expect(slots.holding("p") == 0)
        #expect(slots.take("p") != nil)
        _ = held
    }

    /// Exports that run to their end give their slots back: one after another, each is answered (a slot kept past its
    /// stream would refuse every later export of the project).
    @Test func exportsThatEndGiveTheirSlotsBack() async throws {
        try await InProcessService.with { s in
            let i = try await s.createInstallation()
            for _ in 0..<3 {
                #expect(try await s.request("GET", "/v1/projects/\(s.project.id):export", headers: s.serverHeaders).status == 200)
            }
            for _ in 0..<6 {
                let path = "/v1/projects/\(s.project.id)/installations/\(i.fid):export"
                #expect(try await s.request("GET", path, headers: s.serverHeaders).status == 200)
            }
        }
    }

    /// The same over real sockets, where the response's stream is written by the event loop.
    @Test(.enabled(if: TestDatabase.isAvailable))
    func liveExportsThatEndGiveTheirSlotsBack() async throws {
        try await TestService.with { s in
            _ = try await s.createInstallation()
            for _ in 0..<3 {
                #expect(try await s.request("GET", "/v1/projects/\(s.project.id):export", headers: s.serverHeaders).status == 200)
            }
        }
    }
}
