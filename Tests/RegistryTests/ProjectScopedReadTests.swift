import Foundation
import Postgres
import RegistryPostgres
import Testing
import TokenRegistryTesting

/// The class (docs/security.md, class 19): a tenant's read of its own rows must be an index range of its project, not
/// a walk of every tenant's. `overdue_deletions` had no index but its primary key, so a receipt look-up by FID read
/// every tenant's purged receipts; the receipt lists walked `deletions` by id across tenants.
///
/// The sweep is generated from the schema: every table with a `project_id` column must have an index that leads with
/// it (or declare here why it needs none). The receipt lists' plans are then checked for their index ranges.
@Suite("Reads of a project are ranges of its project", .enabled(if: TestDatabase.isAvailable))
struct ProjectScopedReadTests {
    /// Tables with a project's rows that no read filters by project alone, and why.
    static let exempt: [String: String] = [
        "event_outbox":
            "the relay moves every row to `events` within a second, reading the whole table by transaction; reads by "
            + "installation (an export, an erasure) meet at most the last second's writes",
    ]

    @Test func everyTableWithAProjectsRowsHasAnIndexLeadingWithIt() async throws {
        try await TestDatabase.with { conninfo in
            try await Schema.migrator.migrate(conninfo: conninfo)
            let connection = try await PostgresConnection.connect(conninfo)
            let rows = try await connection.query(
                """
                SELECT c.relname AS table FROM pg_class c
                JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'project_id' AND NOT a.attisdropped
                WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace
                  AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indkey[0] = a.attnum)
                ORDER BY 1
                """)
            let tables = try rows.map { try $0.require("table", as: String.self) }
            let undeclared = tables.filter { Self.exempt[$0] == nil }
            #expect(undeclared.isEmpty, "no index leads with project_id on \(undeclared)")
        }
    }

    /// The receipt reads, planned as the service runs them (sequential scans off, so any index path is taken if one
    /// exists): each is an index range that starts with the project.
    @Test func receiptReadsAreRangesOfTheProject() async throws {
        try await TestDatabase.with { conninfo in
            try await Schema.migrator.migrate(conninfo: conninfo)
            let connection = try await PostgresConnection.connect(conninfo)
            try await connection.query("SET enable_seqscan = off")
            let statements = [
                "SELECT * FROM overdue_deletions WHERE project_id = 'p' AND fid_hmac = '\\x00'::bytea",
                "SELECT * FROM overdue_deletions WHERE project_id = 'p' AND deletion_id > 0 ORDER BY deletion_id LIMIT 100",
                """
                SELECT * FROM deletions WHERE project_id = 'p' AND completed_at IS NULL AND deadline > now()
                AND id > 0 ORDER BY id LIMIT 100
                """,
                "SELECT * FROM deletions WHERE project_id = 'p' AND completed_at IS NOT NULL AND id > 0 ORDER BY id LIMIT 100",
            ]
            for statement in statements {
                let plan = try await connection.query(PostgresQuery(unsafeSQL: "EXPLAIN " + statement, binds: []))
                    .map { try $0.require("QUERY PLAN", as: String.self) }.joined(separator: "\n")
                #expect(!plan.contains("Seq Scan") && !plan.contains("Sort"), "\(statement)\n\(plan)")
                #expect(plan.contains("Index Cond: ((project_id = 'p'::text)"), "\(statement)\n\(plan)")
            }
        }
    }
}
