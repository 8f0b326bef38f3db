import Crypto
import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// The domain's rules, through its services, on in-memory stores: no database, no sockets.
@Suite("Domain rules on in-memory stores")
struct DomainServiceTests {
    /// A project's apps may share an API key (Firebase's are one a platform); a key is one project's, also when two
    /// projects claim a new key at once.
    @Test(arguments: StoreKind.available)
    func appsOfAProjectShareAnAPIKeyThatNoOtherProjectHolds(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let catalog = f.services.catalog
            let shared = try await catalog.createApp(
                project: f.project, platform: .web, bundleID: nil, autoInitDefault: true, apiKey: f.web.apiKey)
            #expect(try await catalog.apps(apiKey: f.web.apiKey).map(\.id) == [f.web.id, shared.id].sorted())
            _ = try await catalog.createProject(id: "other-proj", number: 456)
            let other = Project(id: "other-proj", number: 456)
            await #expect(throws: RegistryError.self) {
                _ = try await catalog.createApp(
                    project: other, platform: .web, bundleID: nil, autoInitDefault: true, apiKey: f.web.apiKey)
            }
            _ = try await catalog.createProject(id: "third-proj", number: 789)
            let third = Project(id: "third-proj", number: 789)
            let key = "AIzaSyClaimedByOneProjectOnly-012345678"
            let outcomes = await withTaskGroup(of: Bool.self) { group in
                for project in [other, third] {
                    group.addTask {
                        (try? await catalog.createApp(
                            project: project, platform: .android, bundleID: nil, autoInitDefault: true, apiKey: key))
                            != nil
                    }
                }
                return await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 }.count == 1)
            #expect(Set(try await catalog.apps(apiKey: key).map(\.projectID)).count == 1)
            #expect(try await catalog.apps(apiKey: "AIzaSyNoSuchKey000000000000000000000000").isEmpty)
        }
    }

    @Test(arguments: StoreKind.available)
    func consentGatesRegistrationAndWithdrawalDisablesAtOnce(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let optedOut = try await f.installation(f.optedOut)
            await #expect(throws: RegistryError.self) { _ = try await f.register(optedOut) }
            try await f.consent(optedOut, true)
            let registration = try await f.register(optedOut)
            #expect(registration.state == .active && registration.token.hasPrefix(optedOut.fid + ":"))
            _ = try await f.services.topics.subscribe(project: f.project, fid: optedOut.fid, topic: "news")
            #expect(try await f.members("news") == [optedOut.fid])

            try await f.consent(optedOut, false)
            #expect(try await f.members("news").isEmpty)
            #expect(
                try await f.services.targeting.sendability(project: f.project, token: registration.token) == .noConsent)
            // Granting again does not revive the registration; registering again does, with the same token.
            try await f.consent(optedOut, true)
            #expect(try await f.members("news").isEmpty)
            #expect(
                try await f.services.targeting.sendability(project: f.project, token: registration.token) == .disabled)
            let again = try await f.register(optedOut)
            #expect(again.token == registration.token && again.state == .active)
            #expect(try await f.members("news") == [optedOut.fid])
        }
    }

    /// A topic page holds `limit` live registrations while any are left, however many subscribers between them are
    /// filtered out, for a topic of every installation ("t") and for one of five in thirty ("few").
    @Test(arguments: StoreKind.available)
    func topicPagesAreFullWhenSubscribersAreFilteredOut(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            var fids: [String] = []
            for n in 0..<30 {
                let i = try await f.installation(
                    fid: "cPage" + String(repeating: "0", count: 15) + String(n / 10) + "\(n % 10)")
                _ = try await f.register(i)
                _ = try await f.services.topics.subscribe(project: f.project, fid: i.fid, topic: "t")
                if [0, 9, 10, 21, 27].contains(n) {
                    _ = try await f.services.topics.subscribe(project: f.project, fid: i.fid, topic: "few")
                }
                if [0, 27].contains(n) {
                    _ = try await f.services.topics.subscribe(project: f.project, fid: i.fid, topic: "far")
                }
                if n % 3 != 0 { try await f.consent(i, false) }
                fids.append(i.fid)
            }
            func pages(_ topic: String, limit: Int = 2) async throws -> [[String]] {
                var pages: [[String]] = []
                var after: String?
                repeat {
                    let page = try await f.services.targeting.members(
                        projectID: f.project.id, topic: topic, after: after, limit: limit
                    ).map(\.fid)
                    pages.append(page)
                    after = page.last
                } while !(pages.last!.isEmpty)
                return pages
            }
            let live = stride(from: 0, to: 30, by: 3).map { fids[$0] }
            #expect(try await pages("t") == stride(from: 0, to: 10, by: 2).map { [live[$0], live[$0 + 1]] } + [[]])
            #expect(try await pages("few") == [[fids[0], fids[9]], [fids[21], fids[27]], []])
            // 27 registrations between the second page's cursor and its subscriber: on PostgreSQL that page is read
            // by look-ups (PostgresTargetingStore.PagePlan), the others by merges.
            #expect(try await pages("far", limit: 1) == [[fids[0]], [fids[27]], []])
        }
    }

    @Test(arguments: StoreKind.available)
    func theRefreshCallbackKeepsTheNewestClientTime(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let a = try await f.installation()
            let b = try await f.installation()
            let t0 = f.clock.now()
            #expect(try await f.refresh(a.fid, "tok-1", at: t0).1 == .created)
            #expect(try await f.refresh(a.fid, "tok-2", at: t0.addingTimeInterval(10)).1 == .superseded)
            let (kept, outcome) = try await f.refresh(a.fid, "tok-old", at: t0.addingTimeInterval(5))
            #expect(outcome == .ignoredAsOlder && kept.token == "tok-2")
            #expect(try await f.refresh(a.fid, "tok-2", at: nil).1 == .refreshed)
            // A token reported for another installation moves there.
            #expect(try await f.refresh(b.fid, "tok-2", at: t0.addingTimeInterval(20)).1 == .moved)
            #expect(try await f.services.registrations.find(project: f.project, tokenOrFID: a.fid) == nil)
            await #expect(throws: RegistryError.self) { _ = try await f.refresh(a.fid, "bad token", at: nil) }
            // No consent, no registration.
            try await f.consent(a, false)
            await #expect(throws: RegistryError.self) { _ = try await f.refresh(a.fid, "tok-3", at: nil) }
        }
    }

    @Test func refreshOrderRule() {
        let t = Date(timeIntervalSince1970: 1000)
        #expect(RefreshOutcome.accepts(incoming: nil, stored: t))
        #expect(RefreshOutcome.accepts(incoming: t, stored: nil))
        #expect(RefreshOutcome.accepts(incoming: t, stored: t))
        #expect(!RefreshOutcome.accepts(incoming: t, stored: t.addingTimeInterval(1)))
    }

    @Test(arguments: StoreKind.available)
    func targetingSkipsExpiredAndUnconsentedAndResolvesConditions(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let old = try await f.installation()
            _ = try await f.register(old)
            f.clock.advance(by: 271 * 86_400)
            let fresh = try await f.installation()
            _ = try await f.register(fresh)
            let quiet = try await f.installation()
            _ = try await f.register(quiet)
            for i in [old, fresh, quiet] {
                _ = try await f.services.topics.subscribe(project: f.project, fid: i.fid, topic: "a")
            }
            try await f.consent(quiet, false)
            // Without consent, no new subscription either.
            await #expect(throws: RegistryError.self) {
                _ = try await f.services.topics.subscribe(project: f.project, fid: quiet.fid, topic: "b")
            }
            _ = try await f.services.topics.subscribe(project: f.project, fid: fresh.fid, topic: "b")
            #expect(try await f.members("a") == [fresh.fid])
            let resolved = try await f.services.targeting.resolve(
                projectID: f.project.id, condition: try Condition.parse("'a' in topics && !('b' in topics)"),
                after: nil,
                limit: 10)
            #expect(resolved.isEmpty)
            #expect(try await f.services.targeting.sendability(project: f.project, token: old.fid) == .expired)
            #expect(
                try await f.services.targeting.sendability(project: f.project, token: "unknown-token") == .unknownToken)
        }
    }

    @Test(arguments: StoreKind.available)
    func expiryDeletesOnlyInstallationsStillIdle(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let idle = try await f.installation()
            let back = try await f.installation()
            f.clock.advance(by: 271 * 86_400)
            try await f.services.installations.noteActivity(back)
            #expect(try await f.services.jobs.expireIdle() == 1)
            #expect(try await f.services.installations.find(project: f.project, fid: idle.fid) == nil)
            #expect(try await f.services.installations.find(project: f.project, fid: back.fid) != nil)
            #expect(
                try await f.services.deletions.receipt(projectID: f.project.id, fid: idle.fid)?.reason == .inactivity)
        }
    }

    @Test(arguments: StoreKind.available)
    func aRefreshRecordsTheSDKVersionTheClientNowReports(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let installation = try await f.installation()
            #expect(installation.sdkVersion == "t:1")
            let seen = installation.lastSeenAt
            // The same version within the hour: nothing written.
            _ = try await f.services.installations.generateAuthToken(
                project: f.project, for: installation, sdkVersion: "t:1")
            #expect(try await f.services.installations.find(project: f.project, fid: installation.fid)! == installation)
            // An upgraded SDK is recorded at once; the last-seen time never goes back.
            f.clock.advance(by: 60)
            _ = try await f.services.installations.generateAuthToken(
                project: f.project, for: installation, sdkVersion: "t:2")
            let upgraded = try await f.services.installations.find(project: f.project, fid: installation.fid)!
            #expect(upgraded.sdkVersion == "t:2" && upgraded.lastSeenAt >= seen)
            // No version in the request keeps the stored one, also when the hour has passed.
            f.clock.advance(by: 2 * 3600)
            _ = try await f.services.installations.generateAuthToken(project: f.project, for: upgraded)
            let later = try await f.services.installations.find(project: f.project, fid: installation.fid)!
            #expect(later.sdkVersion == "t:2" && later.lastSeenAt > upgraded.lastSeenAt)
            // A stale copy of the row (an older last-seen) does not move the stored time back.
            _ = try await f.services.installations.generateAuthToken(
                project: f.project, for: installation, sdkVersion: "t:3")
            let last = try await f.services.installations.find(project: f.project, fid: installation.fid)!
            #expect(last.sdkVersion == "t:3" && last.lastSeenAt >= later.lastSeenAt)
        }
    }

    @Test(arguments: StoreKind.available)
    func batchImportIsOneCallAndRespectsTheAppsConsentDefault(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let ios = try await f.services.catalog.createApp(
                project: f.project, platform: .ios, bundleID: "com.example.in", autoInitDefault: true)
            let first = try await f.services.registrations.importAPNs(
                project: f.project, app: ios, apnsTokens: ["ABCDEF01", "not-hex", nil], sandbox: true)
            guard case let .imported(apns, token) = first[0] else { Issue.record("\(first)"); return }
            #expect(apns == "abcdef01" && first[1] == .invalid && first[2] == .invalid)
            let again = try await f.services.registrations.importAPNs(
                project: f.project, app: ios, apnsTokens: ["abcdef01"], sandbox: true)
            #expect(again == [.imported(apnsToken: "abcdef01", registrationToken: token)])
            let refused = try await f.services.registrations.importAPNs(
                project: f.project, app: f.optedOut, apnsTokens: ["0123"], sandbox: false)
            #expect(refused == [.noConsent(apnsToken: "0123")])
            let registration = try #require(
                try await f.services.registrations.find(project: f.project, tokenOrFID: token))
            #expect(registration.apnsEnvironment == .sandbox && registration.platform == .ios)
        }
    }

    @Test(arguments: StoreKind.available)
    func theChangeFeedNumbersEventsInOrder(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let i = try await f.installation()
            _ = try await f.register(i)
            try await f.consent(i, false)
            _ = try await f.services.installations.delete(projectID: f.project.id, fid: i.fid, reason: .client)
            // The relay numbers an event once no older transaction is running anywhere on the cluster (other tests
            // share it), so it may take a few rounds.
            var events: [FeedEvent] = []
            try await f.services.jobs.relay {
                events = try await f.services.feed.events(projectID: f.project.id, after: 0, limit: 100)
                return events.count >= 5
            }
            #expect(
                events.map(\.type) == [
                    .installationCreated, .registrationCreated, .consentChanged, .registrationDisabled,
                    .installationDeleted,
                ])
            #expect(events.map(\.sequence) == events.map(\.sequence).sorted())
            #expect(
                try await f.services.feed.events(projectID: f.project.id, after: events[2].sequence, limit: 100).count
                    == 2)
        }
    }

    @Test(arguments: StoreKind.available)
    func topicsHaveALimitPerInstallation(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let i = try await f.installation()
            let many = (0..<Topic.maxPerInstallation).map { "t\($0)" }
            for topic in many {
                _ = try await f.services.topics.subscribe(project: f.project, fid: i.fid, topic: topic)
            }
            await #expect(throws: RegistryError.self) {
                _ = try await f.services.topics.subscribe(project: f.project, fid: i.fid, topic: "one-more")
            }
            #expect(try await f.services.topics.all(project: f.project, fid: i.fid).count == Topic.maxPerInstallation)
            #expect(throws: RegistryError.self) { try TopicService.name("a b", field: "topic") }
            #expect(try TopicService.name("/topics/news", field: "topic") == "news")
        }
    }
}

/// The jobs on the database's clock: a replica whose own clock jumps cannot expire or purge by it.
@Suite("Jobs on the database's clock", .enabled(if: TestDatabase.isAvailable))
struct JobClockTests {
    @Test func aReplicaWhoseClockJumpsDeletesNothingAndSaysWhy() async throws {
        try await DomainFixture.with(.postgres, databaseTime: true) { f in
            let live = try await f.installation()
            f.clock.advance(by: 300 * 86_400)  // this replica now believes it is 300 days later
            let skew = try #require(try await f.services.jobs.clock.skew())
            #expect(abs(skew - 300 * 86_400) < 60)
            let report = try await f.services.jobs.run()
            #expect(report.skipped.keys.sorted() == ["audit-purge", "expire", "purge", "purge-checkins", "purge-retired"])
            #expect(report.processed["expire"] == nil && report.processed["deliver"] == 0)
            // Even asked directly, expiry measures idleness on the database's clock: the installation is live.
            #expect(try await f.services.jobs.expireIdle() == 0)
            #expect(try await f.services.installations.find(project: f.project, fid: live.fid) != nil)
        }
    }

    @Test func inStepTheJobsRunAndTakeTheDatabasesTime() async throws {
        try await DomainFixture.with(.postgres, databaseTime: true) { f in
            let report = try await f.services.jobs.run()
            #expect(report.skipped.isEmpty && abs(report.clockSkewSeconds ?? 99) < 60)
            let now = try await f.services.jobs.clock.now()
            #expect(abs(now.timeIntervalSinceNow) < 60)
        }
    }
}
