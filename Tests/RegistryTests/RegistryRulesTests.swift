import Foundation
import Testing

@testable import Registry

/// The registry's rules that need no database: identifiers, topics, conditions, back-off, sendability.
@Suite("Registry rules")
struct RegistryRulesTests {
    @Test func generatedFIDsAreValidAndDistinct() throws {
        var seen = Set<String>()
        for _ in 0..<500 {
            let fid = try Identifiers.newFID()
            #expect(Identifiers.isValidFID(fid), "\(fid)")
            #expect("cdef".contains(fid.first!))
            seen.insert(fid)
        }
        #expect(seen.count == 500)
    }

    static let fids: [(String, Bool)] = [
        ("dIsVQ2QVRT-TsRovAPrE3U", true), ("fAbCdEfGh_1", true), ("aIsVQ2QVRT-TsRovAPrE3U", false), ("", false),
        ("d+HpS5GGsk4TIJxfsyPF3wA=", false), ("dIsVQ2QVRT-TsRovAPrE3", false), ("dIsVQ2QVRT/TsRovAPrE3U", false),
    ]

    @Test(arguments: fids)
    func fidValidation(_ example: (String, Bool)) {
        #expect(Identifiers.isValidFID(example.0) == example.1, "\(example.0)")
    }

    static let origins: [(String, String?)] = [
        ("https://App.Example", "https://app.example"), ("http://localhost:5173", "http://localhost:5173"),
        ("capacitor://localhost", "capacitor://localhost"), ("ionic://localhost", "ionic://localhost"),
        ("chrome-extension://abcdefghijklmnopabcdefghijklmnop", "chrome-extension://abcdefghijklmnopabcdefghijklmnop"),
        ("http://[::1]:5173", "http://[::1]:5173"), ("https://[2001:DB8::1]", "https://[2001:db8::1]"),
        ("null", nil), ("file://", nil), ("https://", nil), ("://host", nil), ("1http://host", nil),
        ("https://a.example/", nil), ("https://a.example/path", nil), ("https://user@a.example", nil),
        ("https://a.example:0", nil), ("https://a.example:65536", nil), ("https://a.example:+80", nil),
        ("https://a.example:80:80", nil), ("https://a.example:", nil), ("http://[::1", nil), ("http://[]", nil),
        ("http://[::1]x", nil), ("http://[::g]", nil), ("http://[1.2.3.4]", nil), ("https://a example", nil),
        ("https://a.example?x", nil), ("ht tp://a.example", nil), (String(repeating: "a", count: 33) + "://a", nil),
        ("https://" + String(repeating: "a", count: 254), nil),
    ]

    @Test(arguments: origins)
    func webOrigins(_ example: (String, String?)) {
        #expect(Identifiers.webOrigin(example.0) == example.1, "\(example.0)")
    }

    @Test func firebaseShapedKeysAndIDs() throws {
        let key = try Identifiers.newAPIKey()
        #expect(key.count == 39 && key.hasPrefix("AIza") && Identifiers.isValidAPIKey(key))
        let app = try Identifiers.newAppID(projectNumber: 123, platform: .android)
        #expect(app.hasPrefix("1:123:android:") && Identifiers.isValidAppID(app))
        #expect(!Identifiers.isValidAppID("1:x:web:ab"))
        #expect(
            Identifiers.isValidProjectID("demo-proj") && !Identifiers.isValidProjectID("Demo")
                && !Identifiers.isValidProjectID("ab"))
        #expect(try Identifiers.newRefreshToken().hasPrefix("3_"))
        let token = try RegistrationToken.new(fid: "dIsVQ2QVRT-TsRovAPrE3U")
        #expect(token.hasPrefix("dIsVQ2QVRT-TsRovAPrE3U:") && RegistrationToken.isValid(token))
        #expect(!RegistrationToken.isValid("with space") && !RegistrationToken.isValid(""))
    }

    @Test func topicNames() {
        #expect(Topic.isValid("news") && Topic.isValid("a-b_c.d~e%f") && !Topic.isValid("") && !Topic.isValid("a b"))
        #expect(Topic.isValid(String(repeating: "x", count: 900)) && !Topic.isValid(String(repeating: "x", count: 901)))
        #expect(Topic.normalize("/topics/news") == "news")
    }

    @Test func conditionGrammarAndLimits() throws {
        #expect(
            try Condition.parse("!('a' in topics) || 'b' in topics && 'c' in topics")
                == .or(.not(.topic("a")), .and(.topic("b"), .topic("c"))))
        #expect(try Condition.parse("'a' in topics && ('b' in topics || 'c' in topics)").topics == ["a", "b", "c"])
        do {
            _ = try Condition.parse("'a' in topics && ")
            Issue.record("expected an error")
        } catch {
            #expect(error.position == 17)
        }
        #expect(throws: ConditionError.self) {
            try Condition.parse((1...6).map { "'t\($0)' in topics" }.joined(separator: " || "))
        }
    }

    @Test func backoffDoublesWithJitterAndACap() {
        var policy = DeletionPolicy()
        policy.backoffBase = 1
        policy.backoffMax = 3600
        for attempts in 1...20 {
            let nominal = min(3600, pow(2, Double(attempts - 1)))
            let delay = policy.backoff(afterAttempts: attempts)
            #expect(delay >= nominal * 0.8 && delay <= nominal * 1.2, "attempt \(attempts): \(delay)")
        }
    }

    @Test func sendabilityFollowsStateConsentAndAge() {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let freshness = Freshness(staleDays: 30, expireDays: 270)
        func registration(ageDays: Double, state: RegistrationState = .active) -> Registration {
            let at = clock.now().addingTimeInterval(-ageDays * 86_400)
            return Registration(
                projectID: "p", fid: "f", token: "t", platform: .web, state: state, createdAt: at, refreshedAt: at)
        }
        #expect(freshness.sendability(of: registration(ageDays: 1), messagingConsent: true, at: clock.now()) == .ok)
        #expect(freshness.sendability(of: registration(ageDays: 31), messagingConsent: true, at: clock.now()) == .stale)
        #expect(
            freshness.sendability(of: registration(ageDays: 271), messagingConsent: true, at: clock.now()) == .expired)
        #expect(
            freshness.sendability(of: registration(ageDays: 1), messagingConsent: false, at: clock.now()) == .noConsent)
        #expect(
            freshness.sendability(
                of: registration(ageDays: 1, state: .disabled), messagingConsent: true, at: clock.now())
                == .disabled)
        #expect(Sendability.stale.sendable && !Sendability.expired.sendable)
    }

    @Test func consentPurposes() {
        #expect(ConsentService.isValidPurpose("messaging") && ConsentService.isValidPurpose("marketing-email"))
        #expect(
            !ConsentService.isValidPurpose("Messaging") && !ConsentService.isValidPurpose("")
                && !ConsentService.isValidPurpose("1x"))
    }
}
