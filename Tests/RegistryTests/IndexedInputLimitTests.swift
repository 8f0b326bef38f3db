import Foundation
import Postgres
import Registry
import RegistryPostgres
import Testing
import TokenRegistryTesting

/// The class: a value the service stores in a B-tree index whose input limit lets it outgrow an index entry (2704
/// bytes on 8 kB pages). PostgreSQL then refuses the write (54000), which was a 500, and the write's group-committed
/// batch ran again statement by statement. Registration tokens were the member found (4096 bytes taken; 3000 random
/// characters failed, 4096 repeated ones compressed and passed).
///
/// The sweep is generated from the schema: every text and bytea column of every index the migrations made must have
/// a declared limit here, and each index's columns together must fit one entry uncompressed. A new indexed column
/// fails the test until its limit is declared, and a limit raised past what fits fails it too.
@Suite("Indexed inputs fit an index entry")
struct IndexedInputLimitTests {
    /// The most bytes each indexed column can hold, by `table.column` (`*.column` for every table), and what bounds
    /// it.
    static let limits: [String: Int] = [
        // Client input, each bounded where it is validated.
        "*.project_id": 30,  // Identifiers.isValidProjectID
        "*.fid": 22,  // Identifiers.isValidFID (22, or 11 for a legacy IID)
        "registrations.token": RegistrationToken.maxBytes,
        "registrations.apns_token": 200,  // RegistrationsController, the IID import
        "topic_subscriptions.topic": 900 + "private/".utf8.count,  // Topic.isValid
        "consents.purpose": 64,  // ConsentService.isValidPurpose
        "linked_services.name": 63,  // DeletionService.isValidServiceName
        "deletion_deliveries.service": 63,
        "delivery_counters.service": 63,
        "user_bindings.user_id": UserService.maxUserIDBytes,
        "sender_tokens.sender": 256,  // SenderTokens: Identifiers.isPlainText(limit: 256)
        "sender_tokens.scope": 256,
        "gcm_registrations.app": 256,  // CheckinController
        "gcm_registrations.subtype": 256,
        "apps.app_id": 128,  // Identifiers.isValidAppID: 1:<number>:<platform>:<1-64>
        // Enumerations (CHECK constraints).
        "registrations.state": 8,  // active, disabled, retired
        "registrations.platform": 8,  // ios, android, web
        "registrations.quarantine_channel": 8,
        "feedback_breakers.channel": 8,
        "feedback_stats.channel": 8,
        "feedback_stats.class": 32,
        // Made by the service (keys, IDs and names it generates), at most this long.
        "apps.api_key": 64,
        "api_keys.api_key": 64,
        "deletion_deliveries.delivery_id": 64,
        "erasures.erasure_id": 64,
        "erasure_members.erasure_id": 64,
        "import_runs.run_key": 128,
        "job_runs.job": 64,
        "server_secrets.name": 64,
        "service_accounts.client_email": 256,
        "service_accounts.key_id": 64,
        "signing_keys.kid": 64,
        "gcm_registrations.token": 256,
        "sender_tokens.token": 256,
        // Hashes (SHA-256, HMAC-SHA-256).
        "audit_log.target_digest": 32,
        "audit_scrubs.digest": 32,
        "deletions.fid_hmac": 32,
        "erasures.user_hmac": 32,
        "overdue_deletions.fid_hmac": 32,
        "retired_fids.fid_hmac": 32,
        "server_keys.key_hash": 32,
        "user_binding_history.previous_user_hmac": 32,
        "user_binding_history.user_hmac": 32,
        "user_bindings.user_hmac": 32,
    ]

    /// The most an index entry holds (`BTMaxItemSize` on 8 kB pages).
    static let entryBytes = 2704

    static func limit(_ table: String, _ column: String) -> Int? {
        limits["\(table).\(column)"] ?? limits["*.\(column)"]
    }

    @Test(.enabled(if: TestDatabase.isAvailable))
    func everyIndexedTextColumnHasALimitThatFitsAnEntry() async throws {
        try await TestDatabase.with { conninfo in
            try await Schema.migrator.migrate(conninfo: conninfo)
            let connection = try await PostgresConnection.connect(conninfo)
            let rows = try await connection.query(
                """
                SELECT ic.relname AS index, c.relname AS table, a.attname AS column,
                    format_type(a.atttypid, a.atttypmod) AS type
                FROM pg_index i
                JOIN pg_class c ON c.oid = i.indrelid
                JOIN pg_class ic ON ic.oid = i.indexrelid
                JOIN pg_am am ON am.oid = ic.relam
                JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
                WHERE c.relnamespace = 'public'::regnamespace AND am.amname = 'btree'
                ORDER BY 1, 3
                """)
            var entries: [String: Int] = [:]
            var undeclared: [String] = []
            for row in rows {
                let index: String = try row.require("index")
                let table: String = try row.require("table")
                let column: String = try row.require("column")
                let type: String = try row.require("type")
                // A varlena header and alignment a column; fixed-width columns (integers, times) at 8.
                guard ["text", "bytea", "character varying"].contains(type) else {
                    entries[index, default: 8] += 8
                    continue
                }
                guard let bytes = Self.limit(table, column) else {
                    undeclared.append("\(table).\(column) (\(index))")
                    continue
                }
                entries[index, default: 8] += 4 + bytes + 4
            }
            #expect(!rows.isEmpty)
            #expect(undeclared.isEmpty, "declare these indexed columns' input limits: \(undeclared)")
            for (index, bytes) in entries.sorted(by: { $0.key < $1.key }) {
                #expect(bytes <= Self.entryBytes, "an entry of \(index) can take \(bytes) bytes")
            }
        }
    }

    /// Random tokens (incompressible) of every length near the limit are stored; one byte more is refused as the
    /// client's error, before the database.
    @Test(arguments: StoreKind.available)
    func tokensUpToTheLimitAreStoredAndLongerOnesRefused(_ kind: StoreKind) async throws {
        try await DomainFixture.with(kind) { f in
            var random = SplitMix(seed: 2048)
            let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:.-")
            func token(_ length: Int) -> String {
                String((0..<length).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] })
            }
            let max = RegistrationToken.maxBytes
            for length in [max, max - 1, 1500, 1 + Int(random.next() % UInt64(max))] {
                let installation = try await f.installation()
                try await f.consent(installation, true)
                let written = try await f.refresh(installation.fid, token(length), at: nil)
                #expect(written.0.token.utf8.count == length)
            }
            let installation = try await f.installation()
            try await f.consent(installation, true)
            for length in [max + 1, 2800, 4096] {
                let refused = await #expect(throws: RegistryError.self) {
                    try await f.refresh(installation.fid, token(length), at: nil)
                }
                #expect(refused?.kind == .invalidArgument, "\(length) bytes")
            }
        }
    }
}
