import Foundation
import Registry
import Testing

/// Enrolment and moves of check-ins (docs/security.md, "Why a check-in may be enrolled and moved"), on both stores.
@Suite("Check-in enrolment and moves")
struct CheckinBindingTests {
    @Test(arguments: StoreKind.available)
    func anUnknownCheckinIsEnrolledAndAKnownOneMovesOnlyWithinItsApp(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let checkins = f.services.checkins
            let first = try await f.installation()
            // Google's check-in: unknown here, enrolled bound to the installation that proved itself.
            guard case let .unknown(device) = try await checkins.identify(aidLogin: "AidLogin 4728194729301:99") else {
                Issue.record("an unknown check-in was reported known")
                return
            }
            let enrolled = try await checkins.enroll(device, for: first)
            #expect(enrolled.fid == first.fid && enrolled.projectID == f.project.id)
            // Enrolling it again (a concurrent request) authenticates the enrolled one instead.
            #expect(try await checkins.enroll(device, for: first).fid == first.fid)
            // Its id with another token is refused: no takeover.
            await #expect(throws: RegistryError.self) { _ = try await checkins.identify(aidLogin: "AidLogin 4728194729301:1") }
            guard case let .known(known) = try await checkins.identify(aidLogin: "AidLogin 4728194729301:99") else {
                Issue.record("the enrolled check-in is not known")
                return
            }
            // Another installation of the same app: the check-in moves to it, and reports where from.
            let second = try await f.installation()
            #expect(try await checkins.bind(known, to: second, previous: first) == first.fid)
            let moved = try await checkins.authenticate(aidLogin: "AidLogin 4728194729301:99")
            #expect(moved.fid == second.fid)
            // Enrolment is bounded per installation (it writes with no check-in of ours).
            let third = try await f.installation()
            for n in 0..<CheckinService.maxEnrolledPerInstallation {
                _ = try await checkins.enroll(DeviceCheckin(androidID: 900_000 + UInt64(n), securityToken: 7), for: third)
            }
            let full = await #expect(throws: RegistryError.self) {
                _ = try await checkins.enroll(DeviceCheckin(androidID: 999_999, securityToken: 7), for: third)
            }
            #expect(full?.kind == .resourceExhausted)
            // An installation of another app: refused.
            let otherApp = try await f.services.catalog.createApp(
                project: f.project, platform: .ios, bundleID: "com.example.other", autoInitDefault: true)
            let foreign = try await f.installation(otherApp)
            let refused = await #expect(throws: RegistryError.self) {
                _ = try await checkins.bind(moved, to: foreign, previous: second)
            }
            #expect(refused?.kind == .permissionDenied)
            // A stale view (it moved meanwhile) does not move it twice.
            await #expect(throws: RegistryError.self) { _ = try await checkins.bind(known, to: foreign, previous: first) }
            #expect(try await checkins.authenticate(aidLogin: "AidLogin 4728194729301:99").fid == second.fid)
        }
    }
}
