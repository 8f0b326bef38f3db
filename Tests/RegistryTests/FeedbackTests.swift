import Foundation
import JSON
import Registry
import Testing

/// Send feedback on both stores: only what is still current retires, a later write revives, the breaker holds
/// mass failures back, and the operator's clearance releases or retires what it held.
@Suite("Send feedback")
struct FeedbackTests {
    static let unregistered: JSONValue = [
        "error": [
            "code": 404, "message": "Requested entity was not found.", "status": "NOT_FOUND",
            "details": [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "UNREGISTERED"]],
        ]
    ]

    static func dead(_ token: String) -> FeedbackResult {
        FeedbackResult(token: token, outcome: FeedbackClassifier.fcm(unregistered))
    }

    /// A sender's strings are relayed as received: whatever an FCM answer's `status` or `errorCode` holds (NUL,
    /// control characters, long or multi-byte text), the code kept is at most 64 bytes of printable text. A NUL made
    /// the whole batch's statement fail (a 400 for every item) instead of one code written with a `?`.
    @Test func codesFromAnyAnswerAreShortPrintableText() {
        var random = SystemRandomNumberGenerator()
        let pieces = ["\u{0}", "\u{1}", "\n", "\u{7f}", "\u{85}", "é", "€", "🙂", "A", "UNREGISTERED", " "]
        for _ in 0..<2000 {
            let text = (0..<Int.random(in: 0...80, using: &random)).map { _ in pieces.randomElement(using: &random)! }
                .joined()
            let field = Bool.random(using: &random) ? "status" : "errorCode"
            let body: JSONValue =
                field == "status"
                ? ["error": ["status": .string(text)]]
                : ["error": ["details": [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": .string(text)]]]]
            let code = FeedbackClassifier.fcm(body).code
            #expect(code.utf8.count <= 64, "\(text.debugDescription)")
            #expect(!code.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }, "\(text.debugDescription)")
        }
    }

    func tokens(_ f: DomainFixture, _ count: Int) async throws -> [(Installation, String)] {
        var out: [(Installation, String)] = []
        for n in 0..<count {
            let i = try await f.installation()
            let token = "\(i.fid):tok-\(n)"
            _ = try await f.refresh(i.fid, token, at: nil)
            out.append((i, token))
        }
        return out
    }

    @Test(arguments: StoreKind.available)
    func onlyTheCurrentTokenRetiresAndALaterWriteRevivesIt(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let service = f.services.feedback
            let (i, token) = try await tokens(f, 1)[0]
            let old = token
            _ = try await f.services.topics.subscribe(project: f.project, fid: i.fid, topic: "x")
            // A token replaced by a refresh is not current: its failure retires nothing.
            let new = "\(i.fid):tok-new"
            _ = try await f.refresh(i.fid, new, at: nil)
            #expect(try await service.apply(project: f.project, [Self.dead(old)]) == [.notCurrent])
            #expect(try await f.services.targeting.sendability(project: f.project, token: new) == .ok)
            // The current one retires, once; the answer says why.
            #expect(try await service.apply(project: f.project, [Self.dead(new), Self.dead(new)]) == [.retired, .alreadyRetired])
            let verdict = try await f.services.targeting.verdict(project: f.project, token: new)
            #expect(verdict.reason == .retired && verdict.registration?.retirement?.reason == "UNREGISTERED")
            #expect(try await f.services.targeting.members(projectID: f.project.id, topic: "x", after: nil, limit: 10).isEmpty)
            // A later refresh makes it live again, and the feed says so.
            _ = try await f.refresh(i.fid, new, at: nil)
            #expect(try await f.services.targeting.sendability(project: f.project, token: new) == .ok)
            // The relay moves what no open transaction (of any database on the cluster) can still precede.
            var types: [EventType] = []
            try await f.services.jobs.relay {
                types = try await f.services.feed.events(projectID: f.project.id, after: 0, limit: 100).map(\.type)
                return types.contains(.registrationRevived)
            }
            #expect(types.contains(.registrationInvalidated) && types.contains(.registrationRevived), "\(types)")
            // Unknown tokens and results about messages touch nothing.
            let badMessage = FeedbackResult(
                token: new,
                outcome: FeedbackClassifier.fcm([
                    "error": [
                        "code": 400, "message": "Invalid value at 'message.data[0].value' (TYPE_STRING), 12",
                        "status": "INVALID_ARGUMENT",
                        "details": [
                            [
                                "@type": "type.googleapis.com/google.rpc.BadRequest",
                                "fieldViolations": [["field": "message.data[0].value", "description": "Invalid value"]],
                            ]
                        ],
                    ]
                ]))
            #expect(try await service.apply(project: f.project, [badMessage, Self.dead("\(i.fid):never")]) == [.ignored, .notCurrent])
            #expect(try await f.services.targeting.sendability(project: f.project, token: new) == .ok)
        }
    }

    /// APNs 410 says since when the token is invalid: a registration refreshed after that stays; the APNs device
    /// token finds its registration as well as the FCM token does; a report of the same token with a client time
    /// before that moment leaves it retired.
    @Test(arguments: StoreKind.available)
    func apnsTimestampsAreComparedWithTheLastRefresh(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let i = try await f.installation()
            let device = String(repeating: "ab", count: 32)
            _ = try await f.services.registrations.refresh(
                project: f.project, fid: i.fid,
                TokenRefresh(
                    token: "\(i.fid):ios", platform: .ios,
                    apns: try APNsDevice(token: device, environment: "PROD", tokenField: "t", environmentField: "e")))
            let before = f.clock.now().addingTimeInterval(-60)
            let stale = FeedbackResult(
                token: device.uppercased(),
                outcome: FeedbackClassifier.apns(status: 410, reason: "Unregistered", timestamp: Int64(before.timeIntervalSince1970 * 1000)))
            #expect(try await f.services.feedback.apply(project: f.project, [stale]) == [.refreshedSince])
            f.clock.advance(by: 120)
            let later = f.clock.now().addingTimeInterval(-30)
            let fresh = FeedbackResult(
                token: device,
                outcome: FeedbackClassifier.apns(status: 410, reason: "Unregistered", timestamp: Int64(later.timeIntervalSince1970 * 1000)))
            #expect(try await f.services.feedback.apply(project: f.project, [fresh]) == [.retired])
            // The backend reports the same tokens again with a client time from before it became invalid: still dead.
            let apns = try APNsDevice(token: device, environment: "PROD", tokenField: "t", environmentField: "e")
            _ = try await f.services.registrations.refresh(
                project: f.project, fid: i.fid,
                TokenRefresh(token: "\(i.fid):ios", platform: .ios, apns: apns, clientTime: later.addingTimeInterval(-10)))
            #expect(try await f.services.targeting.sendability(project: f.project, token: "\(i.fid):ios") == .retired)
            // With a later client time it is live again.
            _ = try await f.services.registrations.refresh(
                project: f.project, fid: i.fid,
                TokenRefresh(token: "\(i.fid):ios", platform: .ios, apns: apns, clientTime: f.clock.now()))
            #expect(try await f.services.targeting.sendability(project: f.project, token: "\(i.fid):ios") == .ok)
        }
    }

    /// A batch whose failures are most of the channel's window (a wrong APNs environment, revoked credentials) trips
    /// the breaker before any of its retirements apply: every token is quarantined and stays targeted; dismissing
    /// the trip releases them, confirming it retires them.
    @Test(arguments: StoreKind.available)
    func theBreakerHoldsMassFailuresBack(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let registered = try await tokens(f, 120)
            for (i, _) in registered.prefix(3) {
                _ = try await f.services.topics.subscribe(project: f.project, fid: i.fid, topic: "news")
            }
            let batch = registered.map { Self.dead($0.1) }
                + (0..<10).map { _ in FeedbackResult(token: "x", outcome: FeedbackClassifier.webpush(status: 201)) }
            let actions = try await f.services.feedback.apply(project: f.project, batch)
            #expect(actions.prefix(120).allSatisfy { $0 == .quarantined }, "\(actions)")
            let report = try await f.services.feedback.report(project: f.project)
            #expect(report.breakers.first { $0.channel == .fcm }?.tripped == true)
            #expect(report.quarantined == 120 && (report.byState["retired"] ?? 0) == 0)
            let members = try await f.services.targeting.members(projectID: f.project.id, topic: "news", after: nil, limit: 10)
            #expect(members.count == 3 && members.allSatisfy(\.quarantined))
            #expect((try await f.services.jobs.gauges()).trippedBreakers.map(\.channel) == ["fcm"])
            // While tripped, a further failure is held back too.
            #expect(try await f.services.feedback.apply(project: f.project, [Self.dead(registered[0].1)]) == [.quarantined])
            // Dismissed: released, the window starts again.
            let dismissed = try await f.services.feedback.clearBreaker(project: f.project, channel: .fcm, confirm: false)
            #expect(dismissed == BreakerClearance(released: 120, retired: 0))
            #expect(try await f.services.feedback.report(project: f.project).quarantined == 0)
            // Failures that go on after the clearance retire as usual (below the breaker's minimum now).
            #expect(try await f.services.feedback.apply(project: f.project, [Self.dead(registered[1].1)]) == [.retired])
            // Tripped again, then confirmed: what it held is retired.
            _ = try await f.services.feedback.apply(project: f.project, registered.dropFirst(2).map { Self.dead($0.1) })
            let confirmed = try await f.services.feedback.clearBreaker(project: f.project, channel: .fcm, confirm: true)
            #expect(confirmed == BreakerClearance(released: 0, retired: 118))
            #expect(try await f.services.feedback.report(project: f.project).byState["retired"] == 119)
            // Clearing a breaker that is not tripped says so.
            await #expect(throws: RegistryError.self) {
                _ = try await f.services.feedback.clearBreaker(project: f.project, channel: .apns, confirm: false)
            }
        }
    }

    /// "May be dead" only quarantines, however long it goes on (a wrong APNs environment answers BadDeviceToken for
    /// every token); a dead result retires; retired rows are purged after their retention.
    @Test(arguments: StoreKind.available)
    func suspectsStayQuarantinedAndRetiredRowsArePurged(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let (i, token) = try await tokens(f, 1)[0]
            let maybe = FeedbackResult(token: token, outcome: FeedbackClassifier.fcm(["error": ["code": 404, "status": "NOT_FOUND"]]))
            #expect(try await f.services.feedback.apply(project: f.project, [maybe]) == [.quarantined])
            #expect(try await f.services.targeting.sendability(project: f.project, token: token) == .ok)
            f.clock.advance(by: 3 * 86_400)
            #expect(try await f.services.feedback.apply(project: f.project, [maybe]) == [.quarantined])
            #expect(try await f.services.feedback.apply(project: f.project, [Self.dead(token)]) == [.retired])
            f.clock.advance(by: 31 * 86_400)
            #expect(try await f.services.feedback.purge(now: f.clock.now()) == 1)
            #expect(try await f.services.registrations.find(project: f.project, tokenOrFID: i.fid) == nil)
        }
    }

    /// The edges: a registration whose consent was withdrawn is nobody's target and not feedback's; an APNs device
    /// token held by two installations (a reinstall) finds the active one refreshed last; a timestamp far in the
    /// future counts as now; a token sent many times, or one the registry does not hold, counts once or not at all
    /// toward the breaker; a replayed report from before an FCM retirement revives nothing.
    @Test(arguments: StoreKind.available)
    func theEdgesOfMatching(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let service = f.services.feedback
            let (withdrawn, withdrawnToken) = try await tokens(f, 1)[0]
            try await f.consent(withdrawn, false)
            #expect(try await service.apply(project: f.project, [Self.dead(withdrawnToken)]) == [.notCurrent])
            // One APNs device token, two installations: the one refreshed last is retired.
            let device = String(repeating: "5e", count: 32)
            var holders: [Installation] = []
            for n in 0..<2 {
                let i = try await f.installation()
                f.clock.advance(by: 10)
                _ = try await f.services.registrations.refresh(
                    project: f.project, fid: i.fid,
                    TokenRefresh(
                        token: "\(i.fid):apns-\(n)", platform: .ios,
                        apns: try APNsDevice(token: device, environment: "PROD", tokenField: "t", environmentField: "e")))
                holders.append(i)
            }
            f.clock.advance(by: 1)
            let future = FeedbackClassifier.apns(status: 410, reason: "Unregistered", timestamp: 1 << 49)
            #expect(try await service.apply(project: f.project, [FeedbackResult(token: device, outcome: future)]) == [.retired])
            #expect(try await f.services.targeting.sendability(project: f.project, token: "\(holders[1].fid):apns-1") == .retired)
            #expect(try await f.services.targeting.sendability(project: f.project, token: "\(holders[0].fid):apns-0") == .ok)
            // The far-future timestamp was taken as now: a later refresh revives it.
            f.clock.advance(by: 1)
            _ = try await f.services.registrations.refresh(
                project: f.project, fid: holders[1].fid,
                TokenRefresh(token: "\(holders[1].fid):apns-1", platform: .ios, clientTime: f.clock.now()))
            #expect(try await f.services.targeting.sendability(project: f.project, token: "\(holders[1].fid):apns-1") == .ok)
            // 150 copies of one token and 150 unknown ones: one counted failure, no breaker.
            let (_, lone) = try await tokens(f, 1)[0]
            let noise = Array(repeating: Self.dead(lone), count: 150) + (0..<150).map { Self.dead("unknown-\($0)") }
            _ = try await service.apply(project: f.project, noise)
            let report = try await service.report(project: f.project)
            #expect(report.breakers.allSatisfy { !$0.tripped }, "\(report.breakers)")
            #expect(report.recent[.fcm]?[.dead] == 1, "\(report.recent)")
            // Retired by FCM (no timestamp): a replayed refresh with a client time from before stays retired.
            let (replayed, replayedToken) = try await tokens(f, 1)[0]
            let before = f.clock.now().addingTimeInterval(-5)
            f.clock.advance(by: 10)
            #expect(try await service.apply(project: f.project, [Self.dead(replayedToken)]) == [.retired])
            _ = try await f.refresh(replayed.fid, replayedToken, at: before)
            #expect(try await f.services.targeting.sendability(project: f.project, token: replayedToken) == .retired)
        }
    }
}
