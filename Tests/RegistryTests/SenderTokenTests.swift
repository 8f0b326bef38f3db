import Foundation
import Registry
import Testing

/// Tokens of other senders and scopes (iOS `retrieveFCMToken(forSenderID:)`), on both stores.
@Suite("Sender tokens")
struct SenderTokenTests {
    @Test func theAudienceOfARegisterForm() throws {
        let project = Project(id: "p", number: 123)
        #expect(try TokenAudience.of(sender: nil, scope: nil, project: project, deleting: false) == .project)
        #expect(try TokenAudience.of(sender: "123", scope: "*", project: project, deleting: false) == .project)
        #expect(try TokenAudience.of(sender: "123", scope: nil, project: project, deleting: true) == .project)
        #expect(
            try TokenAudience.of(sender: "123", scope: "fcm", project: project, deleting: false)
                == .sender("123", scope: "fcm"))
        #expect(try TokenAudience.of(sender: "9", scope: nil, project: project, deleting: false) == .sender("9", scope: "*"))
        #expect(try TokenAudience.of(sender: nil, scope: nil, project: project, deleting: true) == .everything)
        #expect(try TokenAudience.of(sender: "*", scope: "*", project: project, deleting: true) == .everything)
        #expect(throws: RegistryError.self) { try TokenAudience.of(sender: "*", scope: "*", project: project, deleting: false) }
        for bad in ["", String(repeating: "s", count: 257), "a\u{0}b", "a\nb", "\u{7f}"] {
            #expect(throws: RegistryError.self) { try TokenAudience.of(sender: bad, scope: nil, project: project, deleting: false) }
            #expect(throws: RegistryError.self) { try TokenAudience.of(sender: "9", scope: bad, project: project, deleting: false) }
        }
    }

    @Test(arguments: StoreKind.available)
    func aSenderTokenLivesBesideTheRegistrationAndLeavesWithTheInstallation(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let registrations = f.services.registrations
            let i = try await f.installation(f.web)
            let own = try await f.register(i)
            let partner = try await registrations.senderToken(installation: i, sender: "987", scope: "*")
            #expect(partner.hasPrefix(i.fid + ":") && partner != own.token)
            #expect(try await registrations.senderToken(installation: i, sender: "987", scope: "*") == partner)
            #expect(try await registrations.delete(installation: i, .sender("987", scope: "*")) == [partner])
            #expect(try await registrations.delete(installation: i, .sender("987", scope: "*")) == [])
            #expect(try await registrations.find(project: f.project, tokenOrFID: own.token)?.token == own.token)
            let again = try await registrations.senderToken(installation: i, sender: "987", scope: "*")
            #expect(again != partner)
            let everything = try await registrations.delete(installation: i, .everything)
            #expect(Set(everything) == [own.token, again])
            // Gone with its installation.
            let other = try await registrations.senderToken(installation: i, sender: "987", scope: "*")
            #expect(try await f.delete(i, reason: .client))
            let gone = await #expect(throws: RegistryError.self) {
                _ = try await registrations.senderToken(installation: i, sender: "987", scope: "*")
            }
            #expect(gone?.kind == .notFound)
            #expect(try await registrations.delete(installation: i, .everything) == [])
            _ = other
            // Consent is the gate.
            let optedOut = try await f.installation(f.optedOut)
            let refused = await #expect(throws: RegistryError.self) {
                _ = try await registrations.senderToken(installation: optedOut, sender: "987", scope: "*")
            }
            #expect(refused?.kind == .failedPrecondition)
        }
    }

    /// Writers of one installation's sender tokens count one after another (its row lock): 40 at once for 40
    /// senders leave exactly the limit, and the rest are told the installation is full.
    @Test(arguments: StoreKind.available)
    func theLimitHoldsUnderConcurrentWriters(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let registrations = f.services.registrations
            let i = try await f.installation(f.web)
            let outcomes = await withTaskGroup(of: RegistryError.Kind?.self) { group in
                for n in 0..<40 {
                    group.addTask {
                        // A writer the busy pool turned away (503, retry) tries again, as a client would.
                        while true {
                            do {
                                _ = try await registrations.senderToken(installation: i, sender: "s\(n)", scope: "*")
                                return nil
                            } catch let error as RegistryError where error.kind == .unavailable {
                                try? await Task.sleep(for: .milliseconds(20))
                            } catch let error as RegistryError {
                                return error.kind
                            } catch {
                                return .internal
                            }
                        }
                    }
                }
                return await group.reduce(into: [RegistryError.Kind?]()) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 == nil }.count == RegistrationService.maxSenderTokens)
            #expect(outcomes.compactMap { $0 }.allSatisfy { $0 == .resourceExhausted }, "\(outcomes)")
            #expect(try await registrations.delete(installation: i, .everything).count == RegistrationService.maxSenderTokens)
        }
    }
}
