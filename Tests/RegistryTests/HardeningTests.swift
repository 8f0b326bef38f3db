import Crypto
import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// One test (or sweep) per class of hostile input, on both store kinds where a store is involved. Each fails on the
/// code before its fix: the number sweeps trapped (the process died), the others answered or stored what they must
/// not. docs/security.md lists the classes.
@Suite("Hardening by class")
struct HardeningTests {
    /// Int64 edges and their neighbours, the 32-bit edges, and today's time with the tolerances around it.
    static let edges: [Int64] = {
        let now = Int64(Date().timeIntervalSince1970)
        let base: [Int64] = [
            .min, .min + 1, .min + 300, -(1 << 32), -(1 << 31) - 1, -(1 << 31), -301, -300, -1, 0, 1, 300, 301,
            (1 << 31) - 1, 1 << 31, 1 << 32, .max - 300, .max - 1, .max, now, now - 300, now - 301, now + 300,
            now + 301,
        ]
        var random = SplitMix(seed: 24)
        return base + (0..<40).map { _ in Int64(bitPattern: random.next()) }
    }()

    // MARK: - Class 1: client-chosen numbers never trap

    /// Every helper against a model in 128-bit arithmetic, over every pair of edges.
    @Test func clientNumberArithmeticIsExactAndNeverTraps() {
        for a in Self.edges {
            for b in Self.edges {
                let exact = Int128(b) - Int128(a)
                let span = ClientNumbers.span(from: a, to: b)
                let fits = Int128(Int64.min)...Int128(Int64.max) ~= exact
                #expect(span.map { Int128($0) } == (fits ? exact : nil))
                let sum = Int128(a) + Int128(b)
                #expect(Int128(ClientNumbers.adding(a, b)) == min(max(sum, Int128(Int64.min)), Int128(Int64.max)))
                #expect(
                    ClientNumbers.isOrderedSpan(from: a, to: b, atMost: 3600) == (exact > 0 && exact <= 3600))
                let within = ClientNumbers.isWithin(a, 300, of: b)
                #expect(within == (abs(Int128(a) - Int128(b)) <= 300), "\(a) within 300 of \(b)")
            }
        }
        for value in [Double.nan, .infinity, -.infinity, 9.3e18, -9.3e18, 1.5, -0.0, 4.2e9] {
            let whole = ClientNumbers.integer(value, in: 0...Int64.max)
            #expect(whole == (value.isFinite && value == value.rounded() && value >= 0 && value < 9.2e18 ? Int64(value) : nil))
        }
    }

    /// The ack route's `t=` parsed and compared: any text after `t=`, any Int64, never a trap, and only a current
    /// time with the right MAC verifies.
    @Test func signatureTimesAtEveryEdgeNeverTrap() {
        let now = Int64(Date().timeIntervalSince1970)
        let body = Array("{}".utf8)
        for t in Self.edges {
            let header = WebhookSignature.header(secrets: ["s"], timestamp: t, body: body)
            #expect(
                WebhookSignature.verify(header: header, secrets: ["s"], body: body, now: now)
                    == (t >= now - 300 && t <= now + 300), "t=\(t)")
            // The receiving side's clock at an edge too.
            _ = WebhookSignature.verify(header: header, secrets: ["s"], body: body, now: t)
        }
        for text in ["t=-9223372036854775808", "t=9223372036854775808", "t=+5", "t=--1", "t=1e9", "t= ", "t=٣"] {
            #expect(!WebhookSignature.verify(header: text + ",v1=" + String(repeating: "0", count: 64), secrets: ["s"], body: body, now: now))
        }
    }

    /// A service-account assertion whose iat and exp sit at the edges: refused with a reason, never a trap.
    @Test(arguments: StoreKind.available)
    func assertionTimesAtEveryEdgeAreRefusedNotTrapped(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let file = try await f.services.serviceAccounts.create(project: f.project, baseURL: "https://r.example")
            let key = try RSAKey(pem: try #require(file["private_key"]?.stringValue))
            let email = try #require(file["client_email"]?.stringValue)
            let kid = try #require(file["private_key_id"]?.stringValue)
            let now = Int64(f.clock.now().timeIntervalSince1970)
            func assertion(iat: Int64, exp: Int64) throws -> String {
                let header = JSONValue.object([("alg", "RS256"), ("kid", .string(kid))]).encoded()
                let claims = JSONValue.object([
                    ("iss", .string(email)), ("aud", "https://r.example/token"), ("iat", .int(iat)), ("exp", .int(exp)),
                ]).encoded()
                let input = Base64URL.encode(header) + "." + Base64URL.encode(claims)
                return input + "." + Base64URL.encode(try key.sign(Array(input.utf8)))
            }
            for iat in Self.edges {
                for exp in [now + 100, now + 3600, .max, .min, iat] {
                    let valid = iat <= now + 60 && exp > now && exp > iat && Int128(exp) - Int128(iat) <= 3600
                        && exp <= now + 3660
                    let outcome = try? await f.services.serviceAccounts.exchange(assertion: try assertion(iat: iat, exp: exp))
                    #expect((outcome != nil) == valid, "iat \(iat), exp \(exp)")
                }
            }
        }
    }

    /// An assertion whose kid or iss holds text no key could (a NUL, which PostgreSQL refuses as 22021, a control
    /// character) is refused as every bad assertion is, `.unauthenticated` (OAuth's invalid_grant), on both stores:
    /// the kid went to the store unchecked and came back as the database's invalid argument.
    @Test(arguments: StoreKind.available)
    func assertionsNamingImpossibleKeysAreInvalidGrants(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let file = try await f.services.serviceAccounts.create(project: f.project, baseURL: "https://r.example")
            let email = try #require(file["client_email"]?.stringValue)
            let kid = try #require(file["private_key_id"]?.stringValue)
            for (kid, iss) in [("\u{0}", email), (kid + "\u{0}", email), ("a\u{1}b", email), (nil, "x\u{0}@y"), (nil, "\u{7}")] {
                var header: [(String, JSONValue)] = [("alg", "RS256")]
                if let kid { header.append(("kid", .string(kid))) }
                let claims = JSONValue.object([("iss", .string(iss)), ("aud", "https://r.example/token")]).encoded()
                let assertion = Base64URL.encode(JSONValue.object(header).encoded()) + "." + Base64URL.encode(claims)
                    + "." + Base64URL.encode([1, 2, 3])
                let error = await #expect(throws: RegistryError.self) {
                    _ = try await f.services.serviceAccounts.exchange(assertion: assertion)
                }
                #expect(error?.kind == .unauthenticated, "\(String(describing: kid)) \(iss): \(String(describing: error))")
            }
        }
    }

    // MARK: - Class 8: credentials end

    @Test(arguments: StoreKind.available)
    func aRevokedServiceAccountsAssertionsAndTokensStopAtOnceHere(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let accounts = f.services.serviceAccounts
            let file = try await accounts.create(project: f.project, baseURL: "https://r.example")
            let key = try RSAKey(pem: try #require(file["private_key"]?.stringValue))
            let kid = try #require(file["private_key_id"]?.stringValue)
            let now = Int64(f.clock.now().timeIntervalSince1970)
            let header = JSONValue.object([("alg", "RS256"), ("kid", .string(kid))]).encoded()
            let claims = JSONValue.object([
                ("iss", file["client_email"]!), ("aud", "https://r.example/token"), ("iat", .int(now)),
                ("exp", .int(now + 3600)),
            ]).encoded()
            let input = Base64URL.encode(header) + "." + Base64URL.encode(claims)
            let signed = input + "." + Base64URL.encode(try key.sign(Array(input.utf8)))
            let token = try await accounts.exchange(assertion: signed).token
            #expect(try await accounts.project(ofAccessToken: token) == f.project.id)
            #expect(try await accounts.list(projectID: f.project.id).map(\.keyID) == [kid])
            #expect(try await accounts.revoke(keyID: kid))
            #expect(try await accounts.revoke(keyID: kid) == false)
            #expect(try await accounts.project(ofAccessToken: token) == nil)
            await #expect(throws: RegistryError.self) { _ = try await accounts.exchange(assertion: signed) }
            #expect(try await accounts.list(projectID: f.project.id).first?.revokedAt != nil)
        }
    }

    // MARK: - Class 2: names are checked by their rule before any store call

    /// Names that a store would cut or fold (NUL, controls, spaces, capitals, look-alikes): no operation on a linked
    /// service by such a name touches the real one, and the real one's notices still go out.
    @Test(arguments: StoreKind.available)
    func namesBreakingTheirRuleNeverReachTheStore(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let secret = try await f.link("crm")
            for name in ["crm\u{0}", "crm\u{0}x", "crm\n", "crm\r\n", " crm", "CRM", "crm\u{200b}", "ｃｒｍ", ""] {
                #expect(try await f.services.deletions.rotateSecret(projectID: f.project.id, name: name) == nil)
                #expect(try await f.services.deletions.removeLinkedService(projectID: f.project.id, name: name) == false)
            }
            let i = try await f.installation()
            try await f.delete(i, reason: .client)
            for fid in [i.fid + "\u{0}", i.fid + "\n", String(i.fid.dropLast()) + "\u{0}"] {
                #expect(try await f.services.deletions.receipt(projectID: f.project.id, fid: fid) == nil)
            }
            // The real service's secret was never re-sealed: its notice is signed with it and delivered.
            #expect(try await f.services.jobs.run().failed.isEmpty)
            let header = try #require(f.transport.sent.last?.headers.first { $0.0 == "Registry-Signature" }?.1)
            let sent = try #require(f.transport.sent.last)
            #expect(WebhookSignature.verify(header: header, secrets: [secret], body: sent.body, now: Int64(Date().timeIntervalSince1970)))
        }
    }

    // MARK: - Class 4: receipts only the linked service can write

    @Test(arguments: StoreKind.available)
    func onlyTheServiceItselfCanAcknowledgeAndOnlyWhatItWasSent(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let handed = try await f.link("crm")
            let own = try await f.rotateAsService("crm", secret: handed)
            let first = try await f.installation()
            let second = try await f.installation()
            try await f.delete(first, reason: .client)
            try await f.delete(second, reason: .client)
            f.transport.answer("https://crm.example/hook", .status(202), .status(202))
            _ = try await f.services.jobs.deliverDue()
            let firstID = try f.deliveryID("crm", fid: first.fid)
            func refused(_ kind: RegistryError.Kind, _ body: () async throws -> Void) async {
                let error = await #expect(throws: RegistryError.self) { try await body() }
                #expect(error?.kind == kind)
            }
            // A notice's own signature, replayed as an acknowledgement, confirms nothing.
            let notice = try #require(f.transport.sent.first { (try? JSONParser.parse($0.body))?["fid"]?.stringValue == first.fid })
            let noticeSignature = try #require(notice.headers.first { $0.0 == "Registry-Signature" }?.1)
            await refused(.unauthenticated) {
                try await f.services.deletions.acknowledge(
                    projectID: f.project.id, fid: first.fid, service: "crm", deliveryID: firstID,
                    signature: noticeSignature, body: notice.body)
            }
            // A signature for one FID's delivery does not count on another FID's route.
            let body = Array("{\"deliveryId\":\"\(firstID)\"}".utf8)
            let forFirst = WebhookSignature.header(
                secrets: [own], timestamp: Int64(Date().timeIntervalSince1970), body: body,
                for: .acknowledgement(project: f.project.id, fid: first.fid, service: "crm", deliveryID: firstID))
            await refused(.unauthenticated) {
                try await f.services.deletions.acknowledge(
                    projectID: f.project.id, fid: second.fid, service: "crm", deliveryID: firstID,
                    signature: forFirst, body: body)
            }
            // Nor for another delivery id, even of the right FID (no such delivery: 404 after a valid signature).
            await refused(.notFound) { try await f.acknowledge("crm", fid: second.fid, secret: own, deliveryID: firstID) }
            try await f.acknowledge("crm", fid: first.fid, secret: own)
            // The project re-keys: it knows the new secret, which then acknowledges nothing, and the receipt says so.
            let (rekeyed, _) = try #require(try await f.services.deletions.rotateSecret(projectID: f.project.id, name: "crm"))
            await refused(.permissionDenied) { try await f.acknowledge("crm", fid: second.fid, secret: rekeyed) }
            let pending = try #require(try await f.services.deletions.receipt(projectID: f.project.id, fid: second.fid))
            #expect(pending.services.first?.rekeyedByProjectAt == f.clock.now())
            let done = try #require(try await f.services.deletions.receipt(projectID: f.project.id, fid: first.fid))
            #expect(done.state == .done && done.services.first?.rekeyedByProjectAt == nil)
            // A removed service's open delivery is abandoned for good: an acknowledgement cannot turn it around.
            #expect(try await f.services.deletions.removeLinkedService(projectID: f.project.id, name: "crm"))
            try await f.link("crm")
            await refused(.unauthenticated) { try await f.acknowledge("crm", fid: second.fid, secret: own) }
        }
    }

    @Test(arguments: StoreKind.available)
    func anAbandonedDeliveryCannotBeAcknowledged(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let own = try await f.rotateAsService("crm", secret: try await f.link("crm"))
            try await f.link("mail")
            let i = try await f.installation()
            try await f.delete(i, reason: .client)
            f.transport.answer("https://crm.example/hook", .status(202))
            f.transport.answer("https://mail.example/hook", .status(500))
            _ = try await f.services.jobs.deliverDue()
            let crmID = try f.deliveryID("crm", fid: i.fid)
            // The service is removed (its open delivery reads abandoned) and registered again under the same name,
            // with a secret of its own: the abandoned delivery stays closed.
            #expect(try await f.services.deletions.removeLinkedService(projectID: f.project.id, name: "crm"))
            let again = try await f.rotateAsService("crm", secret: try await f.link("crm"))
            #expect(again != own)
            let error = await #expect(throws: RegistryError.self) {
                try await f.acknowledge("crm", fid: i.fid, secret: again, deliveryID: crmID)
            }
            #expect(error?.kind == .failedPrecondition)
            let receipt = try #require(try await f.services.deletions.receipt(projectID: f.project.id, fid: i.fid))
            #expect(receipt.services.first { $0.service == "crm" }?.state == .abandoned)
        }
    }

    // MARK: - Class 3: one project never stops another's work

    @Test(arguments: StoreKind.available)
    func oneProjectsBacklogNeverTakesTheWholeClaim(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            try await f.link("crm")
            for _ in 0..<30 { try await f.delete(try await f.installation(), reason: .client) }
            let other = Project(id: "other-proj", number: 456)
            _ = try await f.services.catalog.createProject(id: other.id, number: other.number)
            let app = try await f.services.catalog.createApp(
                project: other, platform: .web, bundleID: nil, autoInitDefault: true)
            _ = try await f.services.deletions.addLinkedService(
                projectID: other.id, name: "crm", endpoint: "https://other.example/hook")
            let created = try await f.services.installations.create(
                project: other, app: app, requestedFID: nil, sdkVersion: "t:1")
            #expect(try await f.services.installations.delete(projectID: other.id, fid: created.fid, reason: .client))
            // The other project's one deletion is newer than all 30, and still goes out in the first claim.
            f.clock.advance(by: 1)
            #expect(try await f.services.jobs.deliverDue(batch: 8) == f.services.deletions.policy.deliveriesPerProject + 1)
            #expect(f.transport.sent.contains { $0.endpoint == "https://other.example/hook" })
        }
    }

    @Test(arguments: StoreKind.available)
    func aProjectHasAtMostItsLinkedServices(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let limit = f.services.deletions.policy.maxLinkedServices
            for n in 0..<limit { try await f.link("s\(n)") }
            #expect(f.resolver.lookUps.count == limit && f.resolver.lookUps.allSatisfy { $0.owner == f.project.id })
            let error = await #expect(throws: RegistryError.self) { try await f.link("one-more") }
            #expect(error?.kind == .resourceExhausted)
            // Neither an add past the limit nor one of a name taken looks its host up (a look-up can take the
            // resolver's whole time-out, and holds one of the project's look-ups: class 14).
            let taken = await #expect(throws: RegistryError.self) { try await f.link("s0") }
            #expect(taken?.kind == .alreadyExists)
            #expect(f.resolver.lookUps.count == limit)
        }
    }

    /// A linked service's delivery counters (its /metrics series) leave with it: a project that adds, uses and removes
    /// services under new names leaves no series behind, and a delivery recorded after its service was removed adds
    /// none.
    @Test(arguments: StoreKind.available)
    func aRemovedServicesCountersLeaveWithIt(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            for round in 0..<4 {
                _ = try await f.link("m\(round)")
                #expect(try await f.delete(try await f.installation(), reason: .client))
                _ = try await f.services.jobs.deliverDue()
                let counted = try await f.services.jobs.gauges().services.filter { $0.projectID == f.project.id }
                #expect(counted.map(\.service) == ["m\(round)"], "\(counted)")
                #expect(try await f.services.deletions.removeLinkedService(projectID: f.project.id, name: "m\(round)"))
                #expect(try await f.services.jobs.gauges().services.filter { $0.projectID == f.project.id }.isEmpty)
            }
        }
    }

    // MARK: - Class 6: unauthenticated writes are bounded

    @Test(arguments: StoreKind.available)
    func unusedCheckinsArePurgedAndACheckinHoldsAtMostItsRegistrations(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let checkins = f.services.checkins
            let unused = try await checkins.checkIn(androidID: nil, securityToken: nil)
            let used = try await checkins.checkIn(androidID: nil, securityToken: nil)
            let stored = try await checkins.authenticate(aidLogin: "AidLogin \(used.androidID):\(used.securityToken)")
            for n in 0..<CheckinService.maxGCMRegistrations {
                _ = try await checkins.gcmToken(stored, app: "com.example", subtype: "sender-\(n)")
            }
            let error = await #expect(throws: RegistryError.self) {
                _ = try await checkins.gcmToken(stored, app: "com.example", subtype: "one-more")
            }
            #expect(error?.kind == .resourceExhausted)
            // The same registration again is the same token, not a new row.
            _ = try await checkins.gcmToken(stored, app: "com.example", subtype: "sender-0")
            await #expect(throws: RegistryError.self) {
                _ = try await checkins.gcmToken(stored, app: "com.example\u{0}", subtype: "x")
            }
            #expect(try await checkins.purgeUnused(now: f.clock.now().addingTimeInterval(86_400)) == 0)
            let later = f.clock.now().addingTimeInterval(CheckinService.unusedRetention + 60)
            #expect(try await checkins.purgeUnused(now: later) == 1)
            await #expect(throws: RegistryError.self) {
                _ = try await checkins.authenticate(aidLogin: "AidLogin \(unused.androidID):\(unused.securityToken)")
            }
            _ = try await checkins.authenticate(aidLogin: "AidLogin \(used.androidID):\(used.securityToken)")
        }
    }
}
