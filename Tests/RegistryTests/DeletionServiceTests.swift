import Crypto
import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// Deletions through the domain's services: receipts, the fan-out of notices to linked services and their
/// signatures, and FIDs that are never handed out again.
@Suite("Deletions and their notices")
struct DeletionServiceTests {
    @Test(arguments: StoreKind.available)
    func aDeletionWithNoLinkedServiceIsDoneAtOnce(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let i = try await f.installation()
            #expect(try await f.delete(i, reason: .server))
            let receipt = try #require(try await f.services.deletions.receipt(projectID: f.project.id, fid: i.fid))
            #expect(receipt.state == .done && receipt.services.isEmpty && receipt.reason == .server)
            #expect(try await f.services.jobs.gauges().oldestUndeliveredSeconds == 0)
        }
    }

    /// A burst of deletions is fanned out in one jobs run, batch after batch, not 50 notices per jobs interval.
    @Test(arguments: StoreKind.available)
    func oneJobsRunDeliversABurstOfNotices(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            try await f.link("crm")
            var fids: [String] = []
            for _ in 0..<130 {
                let i = try await f.installation()
                #expect(try await f.delete(i, reason: .server))
                fids.append(i.fid)
            }
            let report = try await f.services.jobs.run()
            #expect(report.processed["deliver"] == 130)
            #expect(f.transport.sent.count == 130)
            for fid in fids {
                #expect(try await f.services.deletions.receipt(projectID: f.project.id, fid: fid)?.state == .done)
            }
        }
    }

    @Test(arguments: StoreKind.available)
    func deletionStatesFollowDeliveriesAndTheDeadline(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let crmSecret = try await f.link("crm")
            try await f.link("mail")
            let acked = try await f.installation()
            let late = try await f.installation()
            for i in [acked, late] {
                #expect(try await f.delete(i, reason: .client))
            }
            func state(_ fid: String) async throws -> ReceiptState? {
                try await f.services.deletions.receipt(projectID: f.project.id, fid: fid)?.state
            }
            #expect(try await state(acked.fid) == .pending)
            // crm answers 202 (and acknowledges one of the two later); mail answers 500 twice, then 200.
            f.transport.answer("https://crm.example/hook", .status(202), .status(202))
            f.transport.answer("https://mail.example/hook", .status(500), .status(500))
            #expect(try await f.services.jobs.deliverDue() == 4)
            let crmID = try f.deliveryID("crm", fid: acked.fid)
            await #expect(throws: RegistryError.self) {
                try await f.services.deletions.acknowledge(
                    projectID: f.project.id, fid: acked.fid, service: "crm", deliveryID: crmID, signature: nil,
                    body: [])
            }
            // The secret the project was handed signs notices, never acknowledgements: the service replaces it first.
            let handedOut = await #expect(throws: RegistryError.self) {
                try await f.acknowledge("crm", fid: acked.fid, secret: crmSecret)
            }
            #expect(handedOut?.kind == .permissionDenied)
            let own = try await f.rotateAsService("crm", secret: crmSecret)
            try await f.acknowledge("crm", fid: acked.fid, secret: own)
            let pending = try #require(try await f.services.deletions.receipt(projectID: f.project.id, fid: acked.fid))
            #expect(pending.services.map(\.state) == [.acknowledged, .pending])
            #expect(pending.services[1].lastError == "HTTP 500" && pending.services[1].attempts == 1)
            f.clock.advance(by: 7200)
            #expect(try await f.services.jobs.deliverDue() == 2)
            #expect(try await state(acked.fid) == .done)
            // The other deletion's crm never acknowledges its 202: overdue at the deadline, then known only by hash.
            f.clock.advance(by: DeletionReason.deadline)
            #expect(try await state(late.fid) == .overdue)
            _ = try await f.services.jobs.purge.run()
            let purged = try #require(try await f.services.deletions.receipt(projectID: f.project.id, fid: late.fid))
            #expect(purged.fid == nil && purged.state == .overdue && purged.services.map(\.state) == [.unacknowledged])
            let overdue = try await f.services.deletions.receipts(
                projectID: f.project.id, state: .overdue, afterID: 0, limit: 10)
            #expect(overdue.map(\.fidHash) == [purged.fidHash])
        }
    }

    @Test(arguments: StoreKind.available)
    func removingTheLastPendingServiceCompletesTheDeletion(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            try await f.link("crm")
            let i = try await f.installation()
            try await f.delete(i, reason: .client)
            #expect(try await f.services.deletions.receipt(projectID: f.project.id, fid: i.fid)?.state == .pending)
            #expect(try await f.services.deletions.removeLinkedService(projectID: f.project.id, name: "crm"))
            let receipt = try await f.services.deletions.receipt(projectID: f.project.id, fid: i.fid)
            #expect(receipt?.state == .done && receipt?.services.map(\.state) == [.abandoned])
        }
    }

    @Test(arguments: StoreKind.available)
    func aRotatedSecretSignsBesideTheNewOneForADay(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let handed = try await f.link("crm")
            let old = try await f.rotateAsService("crm", secret: handed)
            let i = try await f.installation()
            try await f.delete(i, reason: .client)
            let new = try await f.rotateAsService("crm", secret: old)
            #expect(new != old)
            f.transport.answer("https://crm.example/hook", .status(202))
            _ = try await f.services.jobs.deliverDue()
            let sent = try #require(f.transport.sent.first)
            let header = try #require(sent.headers.first { $0.0 == "Registry-Signature" }?.1)
            let now = Int64(Date().timeIntervalSince1970)
            #expect(header.split(separator: ",").count == 3)
            #expect(WebhookSignature.verify(header: header, secrets: [new], body: sent.body, now: now))
            #expect(WebhookSignature.verify(header: header, secrets: [old], body: sent.body, now: now))
            #expect(!WebhookSignature.verify(header: header, secrets: [old], body: sent.body, now: now + 301))
            // An acknowledgement signed with the old secret counts for a day, then not.
            f.clock.advance(by: 86_401)
            await #expect(throws: RegistryError.self) { try await f.acknowledge("crm", fid: i.fid, secret: old) }
            try await f.acknowledge("crm", fid: i.fid, secret: new)
            #expect(try await f.services.deletions.receipt(projectID: f.project.id, fid: i.fid)?.state == .done)
        }
    }

    @Test(arguments: StoreKind.available)
    func noticesAreSignedWithTheServiceSecret(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let secret = try await f.link("crm")
            let i = try await f.installation()
            try await f.delete(i, reason: .server)
            _ = try await f.services.jobs.deliverDue()
            let sent = try #require(f.transport.sent.first)
            let signature = try #require(sent.headers.first { $0.0 == "Registry-Signature" }?.1)
            let t = Int64(signature.split(separator: ",")[0].dropFirst(2))!
            #expect(signature == WebhookSignature.header(secrets: [secret], timestamp: t, body: sent.body))
            let body = try JSONParser.parse(sent.body)
            #expect(body["fid"]?.stringValue == i.fid && body["type"]?.stringValue == "installation.deleted")
        }
    }

    @Test(arguments: StoreKind.available)
    func aDeletedFIDIsNeverHandedOutAgain(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let i = try await f.installation()
            try await f.delete(i, reason: .client)
            let again = try await f.installation(fid: i.fid)
            #expect(again.fid != i.fid)
            #expect(try await f.services.installations.wasDeleted(project: f.project, fid: i.fid))
            #expect(try await f.services.targeting.sendability(project: f.project, token: i.fid + ":x") == .deleted)
        }
    }
}
