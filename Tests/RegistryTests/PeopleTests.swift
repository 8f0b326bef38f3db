import Foundation
import Registry
import Testing

/// Users and their installations, erasures by person, and exports: the same rules on both stores.
@Suite("People")
struct PeopleTests {
    @Test(arguments: StoreKind.available)
    func bindMoveUnbindAreRecordedAndFed(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let users = f.services.users
            let phone = try await f.installation()
            let first = try await users.bind(project: f.project, fid: phone.fid, userID: "alice")
            #expect(first.change == .bound && first.binding.userID == "alice")
            #expect(try await users.bind(project: f.project, fid: phone.fid, userID: "alice").change == .unchanged)
            // A login of another person on the shared device moves it.
            #expect(try await users.bind(project: f.project, fid: phone.fid, userID: "bob").change == .moved(from: "alice"))
            #expect(try await users.bindings(project: f.project, userID: "alice").isEmpty)
            #expect(try await users.bindings(project: f.project, userID: "bob").map(\.fid) == [phone.fid])
            #expect(try await users.unbind(project: f.project, fid: phone.fid)?.userID == "bob")
            #expect(try await users.unbind(project: f.project, fid: phone.fid) == nil)
            #expect(try await users.binding(project: f.project, fid: phone.fid) == nil)
            let history = try await users.history(project: f.project, fid: phone.fid)
            #expect(history.map(\.action) == [.bound, .moved, .unbound])
            #expect(history[1].previousUserID == "alice" && history[1].userID == "bob")
            // Alice's own history names her, never Bob.
            let alice = try await users.history(project: f.project, userID: "alice")
            #expect(alice.map(\.action) == [.bound, .moved])
            #expect(alice[1].userID == nil && alice[1].previousUserID == "alice")
            // The relay numbers what committed transactions appended; under parallel tests it may take rounds.
            var types: [EventType] = []
            try await f.services.jobs.relay {
                types = try await f.services.feed.events(projectID: f.project.id, after: 0, limit: 100).map(\.type)
                    .filter { $0.rawValue.hasPrefix("user.") }
                return types.count >= 3
            }
            #expect(types == [.userBound, .userMoved, .userUnbound])
            // No such installation, a bad user ID.
            await #expect(throws: RegistryError.self) {
                try await users.bind(project: f.project, fid: "cAAAAAAAAAAAAAAAAAAAAA", userID: "alice")
            }
            // One user in every spelling: a decomposed é is the composed one.
            let decomposed = "jose\u{0301}"
            #expect(try await users.bind(project: f.project, fid: phone.fid, userID: decomposed).binding.userID == "jos\u{00e9}")
            #expect(try await users.bindings(project: f.project, userID: "jos\u{00e9}").map(\.fid) == [phone.fid])
            for bad in ["", String(repeating: "x", count: 129), "a\u{0}b", "line\nbreak"] {
                await #expect(throws: RegistryError.self) {
                    try await users.bind(project: f.project, fid: phone.fid, userID: bad)
                }
            }
        }
    }

    @Test(arguments: StoreKind.available)
    func theCapRefusesOrUnbindsTheLeastRecentlySeen(_ kind: StoreKind) async throws {
        var refuse = UserPolicy()
        refuse.maxInstallationsPerUser = 2
        try await DomainFixture.with(kind, userPolicy: refuse) { f in
            for _ in 0..<2 {
                _ = try await f.services.users.bind(project: f.project, fid: try await f.installation().fid, userID: "u")
            }
            let third = try await f.installation()
            do {
                _ = try await f.services.users.bind(project: f.project, fid: third.fid, userID: "u")
                Issue.record("a bind past the cap was accepted")
            } catch let error as RegistryError {
                #expect(error.kind == .resourceExhausted && error.message.hasPrefix("userId:"))
            }
            #expect(try await f.services.users.bindings(project: f.project, userID: "u").count == 2)
        }
        var unbind = refuse
        unbind.overflow = .unbindLeastRecentlySeen
        try await DomainFixture.with(kind, userPolicy: unbind) { f in
            let old = try await f.installation()
            f.clock.advance(by: 7200)
            let recent = try await f.installation()
            for i in [old, recent] { _ = try await f.services.users.bind(project: f.project, fid: i.fid, userID: "u") }
            let third = try await f.installation()
            let result = try await f.services.users.bind(project: f.project, fid: third.fid, userID: "u")
            #expect(result.displaced == [old.fid])
            #expect(Set(try await f.services.users.bindings(project: f.project, userID: "u").map(\.fid)) == [recent.fid, third.fid])
            #expect(try await f.services.users.history(project: f.project, fid: old.fid).last?.action == .displaced)
        }
    }

    @Test(arguments: StoreKind.available)
    func anErasureDeletesWhatWasBoundAndNamesWhatCameAfter(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let handedOut = try await f.link("crm")
            let users = f.services.users
            let phone = try await f.installation()
            let tablet = try await f.installation()
            let shared = try await f.installation()
            let other = try await f.installation()
            for i in [phone, tablet] { _ = try await users.bind(project: f.project, fid: i.fid, userID: "carol") }
            // The shared device was Carol's, then Dave's: it stays, and its history no longer names Carol.
            _ = try await users.bind(project: f.project, fid: shared.fid, userID: "carol")
            _ = try await users.bind(project: f.project, fid: shared.fid, userID: "dave")
            _ = try await users.bind(project: f.project, fid: other.fid, userID: "dave")
            let receipt = try await f.services.erasures.erase(project: f.project, userID: "carol")
            #expect(receipt.state == .pending && receipt.boundAfter.isEmpty)
            #expect(receipt.record.members.count == 2)
            #expect(Set(receipt.record.members.compactMap(\.deletion?.fid)) == [phone.fid, tablet.fid])
            #expect(receipt.record.members.allSatisfy { $0.deletion?.reason == .erasure })
            #expect(try await f.services.installations.find(project: f.project, fid: phone.fid) == nil)
            #expect(try await f.services.installations.find(project: f.project, fid: shared.fid) != nil)
            #expect(try await users.bindings(project: f.project, userID: "dave").count == 2)
            let sharedHistory = try await users.history(project: f.project, fid: shared.fid)
            #expect(sharedHistory.allSatisfy { $0.userID != "carol" && $0.previousUserID != "carol" })
            // Bound after the erasure: named on the receipt, not swept in.
            let later = try await f.installation()
            _ = try await users.bind(project: f.project, fid: later.fid, userID: "carol")
            let again = try #require(try await f.services.erasures.receipt(project: f.project, id: receipt.record.id))
            #expect(again.boundAfter.map(\.fid) == [later.fid])
            // The linked service confirms both: the receipt is done, and stays so after the purge.
            _ = try await f.services.jobs.runAll()
            let own = try await f.rotateAsService("crm", secret: handedOut)
            for i in [phone, tablet] { try await f.acknowledge("crm", fid: i.fid, secret: own) }
            #expect(try await f.services.erasures.receipt(project: f.project, id: receipt.record.id)?.state == .done)
            f.clock.advance(by: 31 * 86_400)
            _ = try await f.services.jobs.runAll()
            let purged = try #require(try await f.services.erasures.receipt(project: f.project, id: receipt.record.id))
            #expect(purged.state == .done)
            #expect(purged.record.members.allSatisfy { $0.deletion == nil && $0.purgedState == .done })
            #expect(purged.record.members.allSatisfy { $0.services.map(\.service) == ["crm"] })
            #expect(purged.record.members.allSatisfy { $0.services.first?.acknowledgedAt != nil })
        }
    }

    @Test(arguments: StoreKind.available)
    func anErasureReceiptOutlivesItsDeletionRecords(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let phone = try await f.installation()
            _ = try await f.services.users.bind(project: f.project, fid: phone.fid, userID: "erin")
            let receipt = try await f.services.erasures.erase(project: f.project, userID: "erin")
            // No linked service: done at once, purged after the audit period.
            #expect(receipt.state == .done)
            f.clock.advance(by: 31 * 86_400)
            _ = try await f.services.jobs.runAll()
            let purged = try #require(try await f.services.erasures.receipt(project: f.project, id: receipt.record.id))
            #expect(purged.state == .done)
            #expect(purged.record.members.count == 1 && purged.record.members[0].deletion == nil)
            #expect(purged.record.members[0].purgedState == .done)
            #expect(try await f.services.erasures.receipt(project: f.project, id: "er_AAAAAAAAAAAAAAAAAAAAAA") == nil)
        }
    }

    /// The ledger and the events grow with what the installation does: an export reads them a page at a time, each
    /// page after the last one's place, every entry once and in order (2,100 statements: three pages of the ledger,
    /// and three of events, first while none is relayed, then once they all are).
    @Test(arguments: StoreKind.available)
    func anExportReadsTheLedgerAndTheEventsAPageAtATime(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let phone = try await f.installation()
            let statements = 2 * ExportService.pageSize + 100
            for n in 0..<statements { try await f.consent(phone, n.isMultiple(of: 3)) }
            let export = try #require(try await f.services.exports.installation(project: f.project, fid: phone.fid))
            var ledger: [ConsentEvent] = []
            var pages = 0
            while true {
                let page = try await f.services.exports.ledger(of: export, after: ledger.last?.sequence ?? 0)
                #expect(page.count <= ExportService.pageSize)
                if page.isEmpty { break }
                pages += 1
                ledger += page
            }
            // The app's default, then each statement.
            #expect(ledger.count == statements + 1 && pages == 3)
            #expect(ledger.map(\.sequence) == ledger.map(\.sequence).sorted())
            #expect(ledger.dropFirst().map(\.granted) == (0..<statements).map { $0.isMultiple(of: 3) })
            // None relayed yet: every event is read from the outbox, by its place there.
            var pending: [(id: Int64, event: FeedEvent)] = []
            while true {
                let page = try await f.services.exports.pendingEvents(of: export, after: pending.last?.id ?? 0)
                pending += page
                if page.count < ExportService.pageSize { break }
            }
            #expect(pending.count(where: { $0.event.type == .consentChanged }) == statements)
            #expect(pending.map(\.id) == pending.map(\.id).sorted() && Set(pending.map(\.id)).count == pending.count)
            // Relayed: every event in feed order, none left pending.
            try await f.services.jobs.relay {
                try await f.services.exports.pendingEvents(of: export, after: 0).isEmpty
            }
            var events: [FeedEvent] = []
            while true {
                let page = try await f.services.exports.events(of: export, after: events.last?.sequence ?? 0)
                events += page
                if page.count < ExportService.pageSize { break }
            }
            #expect(events.count == pending.count)
            #expect(events.map(\.sequence) == events.map(\.sequence).sorted() && Set(events.map(\.sequence)).count == events.count)
            #expect(try await f.services.exports.pendingEvents(of: export, after: 0).isEmpty)
        }
    }

    @Test(arguments: StoreKind.available)
    func anExportHoldsEachKindOfData(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let phone = try await f.installation()
            try await f.consent(phone, false)
            try await f.consent(phone, true)
            _ = try await f.register(phone)
            _ = try await f.services.topics.subscribe(project: f.project, fid: phone.fid, topic: "news")
            _ = try await f.services.registrations.senderToken(installation: phone, sender: "987", scope: "*")
            _ = try await f.services.users.bind(project: f.project, fid: phone.fid, userID: "frank")
            let export = try await f.services.exports.user(project: f.project, userID: "frank")
            let item = try #require(export.installations.first)
            #expect(item.installation?.fid == phone.fid && item.binding?.userID == "frank")
            #expect(item.registration != nil && item.senderTokens.count == 1)
            #expect(try await f.services.exports.ledger(of: item, after: 0).map(\.granted) == [true, false, true])
            #expect(item.topics.map(\.topic) == ["news"])
            #expect(item.history.map(\.action) == [.bound])
            let events =
                try await f.services.exports.events(of: item, after: 0)
                + f.services.exports.pendingEvents(of: item, after: 0).map(\.event)
            #expect(events.contains { $0.type == .installationCreated })
            #expect(export.history.count == 1 && export.erasures.isEmpty)
            // A deleted installation's export is its receipt.
            #expect(try await f.delete(phone, reason: .server))
            let gone = try #require(try await f.services.exports.installation(project: f.project, fid: phone.fid))
            #expect(gone.installation == nil && gone.deletion?.reason == .server)
        }
    }
}
