import Foundation
import Postgres
import Registry
import RegistryPostgres
import Testing
import TokenRegistryTesting

/// The class (docs/security.md, class 17): rows a client can add under one installation without a bound. Consent
/// purposes were the member found: any number of distinct purposes, each a row of `consents` that every consent view
/// and every sendability answer read whole.
///
/// The sweep is generated from the schema: every table with an installation's key (`project_id`, `fid`) that can hold
/// several rows of one installation (no unique index on the installation's key alone) must declare here what bounds
/// those rows. A new such table fails the test until its bound is declared.
@Suite("What grows under one installation is bounded")
struct PerInstallationBoundTests {
    /// What bounds each table's rows of one installation.
    static let bounds: [String: String] = [
        "consents": "ConsentService.maxPurposes (\(ConsentService.maxPurposes)), under the installation's lock",
        "topic_subscriptions": "Topic.maxPerInstallation (\(Topic.maxPerInstallation))",
        "sender_tokens": "RegistrationService.maxSenderTokens (\(RegistrationService.maxSenderTokens))",
        "checkins": "CheckinService.maxEnrolledPerInstallation (\(CheckinService.maxEnrolledPerInstallation))",
        // Not a count: rows that leave by a rule of their own.
        "event_outbox": "moved to `events` by the relay within a second; one row a write",
        "events": "the change feed's retention (FEED_RETENTION_DAYS); read by installation a page at a time",
        "user_binding_history": "one entry a bind or unbind, made by the project's server only",
        // The one left unbounded, and said so in docs/security.md's known limits: the consent ledger keeps every
        // statement, one entry a request the installation makes. Every read of it is paged.
        "consent_events": "one entry a consent statement: a ledger, not bounded, read a page at a time",
    ]

    @Test(.enabled(if: TestDatabase.isAvailable))
    func everyTableThatGrowsUnderAnInstallationDeclaresItsBound() async throws {
        try await TestDatabase.with { conninfo in
            try await Schema.migrator.migrate(conninfo: conninfo)
            let connection = try await PostgresConnection.connect(conninfo)
            let rows = try await connection.query(
                """
                SELECT c.relname AS table FROM pg_class c
                WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace
                  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'project_id')
                  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'fid')
                  AND NOT EXISTS (
                      SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisunique AND i.indpred IS NULL
                        AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a
                             WHERE a.attrelid = c.oid AND a.attnum = ANY(i.indkey[0:i.indnkeyatts - 1]))
                            <@ ARRAY['fid', 'project_id'])
                ORDER BY 1
                """)
            let tables = try rows.map { try $0.require("table", as: String.self) }
            #expect(tables.contains("consents") && tables.contains("topic_subscriptions"), "the sweep found \(tables)")
            let undeclared = tables.filter { Self.bounds[$0] == nil }
            #expect(undeclared.isEmpty, "declare what bounds these tables' rows of one installation: \(undeclared)")
            let gone = Self.bounds.keys.filter { !tables.contains($0) }.sorted()
            #expect(gone.isEmpty, "no longer in the schema (or now one row an installation): \(gone)")
        }
    }

    /// Purposes up to the bound are recorded; a new one past it is refused and writes nothing (no state, no ledger
    /// entry); a purpose already held may still change at the bound, and messaging is read by its key.
    @Test(arguments: StoreKind.available)
    func consentPurposesStopAtTheBound(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            let installation = try await f.installation()
            let consent = f.services.consent
            func state(_ purpose: String, _ granted: Bool) async throws {
                _ = try await consent.record(
                    installation: installation,
                    change: ConsentChange(purpose: purpose, granted: granted, actor: .installation))
            }
            try await state(ConsentService.messaging, false)
            for n in 1..<ConsentService.maxPurposes { try await state("p\(n)", n.isMultiple(of: 2)) }
            #expect(try await consent.current(installation: installation).count == ConsentService.maxPurposes)
            let ledger = try await consent.history(installation: installation).count
            for purpose in ["p\(ConsentService.maxPurposes)", "another", "z"] {
                let refused = await #expect(throws: RegistryError.self) { try await state(purpose, true) }
                #expect(refused?.kind == .failedPrecondition)
            }
            #expect(try await consent.current(installation: installation).count == ConsentService.maxPurposes)
            #expect(try await consent.history(installation: installation).count == ledger)
            #expect(try await consent.messagingEnabled(installation: installation) == false)
            try await state(ConsentService.messaging, true)
            try await state("p3", true)
            #expect(try await consent.messagingEnabled(installation: installation) == true)
            #expect(try await consent.history(installation: installation).count == ledger + 2)
        }
    }
}
