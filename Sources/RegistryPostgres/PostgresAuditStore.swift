import Foundation
import Postgres
import Registry

/// ``AuditStore`` on PostgreSQL: `audit_pending`, `audit_log` and `audit_chains` (migration 23).
struct PostgresAuditStore: AuditStore {
    let db: Database

    /// One insert, committed with the writes arriving with it (group commit): no lock, so no route waits on the chain.
    func append(_ r: AuditRecord) async throws {
        _ = try await db.groupCommitted(Self.insertion(r), key: "audit")
    }

    static func insertion(_ r: AuditRecord) -> PostgresQuery {
        """
        INSERT INTO audit_pending (project_id, at, action, target, target_digest, subject, actor, request_id, outcome)
        VALUES (\(r.projectID), \(r.at), \(r.action), \(r.target), \(ByteA(r.targetDigest)), \(r.subject), \(r.actor),
            \(r.requestID), \(r.outcome))
        """
    }

    static func append(_ r: AuditRecord, on c: PostgresConnection) async throws { try await c.query(insertion(r)) }

    func chain(limit: Int, share: Int) async throws -> [AuditHead] {
        try await db.query("SELECT * FROM registry_audit_chain(\(limit), \(share))").map {
            AuditHead(
                projectID: try $0.require("chained_project"), seq: try $0.require("new_head_seq"),
                hash: try $0.require("new_head_hash", as: ByteA.self).bytes, chained: try $0.require("chained"))
        }
    }

    func chainState(projectID: String) async throws -> AuditChainState? {
        let pending: Int =
            try await db.query(
                "SELECT count(*)::int AS n FROM audit_pending WHERE project_id = \(projectID)"
            ).first?.require("n") ?? 0
        guard let row = try await db.query("SELECT * FROM audit_chains WHERE project_id = \(projectID)").first else {
            guard pending > 0 else { return nil }
            return AuditChainState(
                anchorSeq: 0, anchorHash: AuditChain.genesis, headSeq: 0, headHash: AuditChain.genesis, pending: pending)
        }
        return AuditChainState(
            anchorSeq: try row.require("anchor_seq"), anchorHash: try row.require("anchor_hash", as: ByteA.self).bytes,
            headSeq: try row.require("head_seq"), headHash: try row.require("head_hash", as: ByteA.self).bytes,
            pending: pending)
    }

    func entries(projectID: String, afterSeq: Int64, limit: Int) async throws -> [AuditEntry] {
        try await db.query(
            """
            SELECT *, (extract(epoch FROM at) * 1000000)::bigint AS at_us FROM audit_log
            WHERE project_id = \(projectID) AND seq > \(afterSeq) ORDER BY seq LIMIT \(limit)
            """
        ).map {
            AuditEntry(
                projectID: try $0.require("project_id"), seq: try $0.require("seq"), at: try $0.require("at"),
                atMicros: try $0.require("at_us"), action: try $0.require("action"), target: try $0.decode("target"),
                targetDigest: try $0.require("target_digest", as: ByteA.self).bytes, subject: try $0.require("subject"),
                actor: try $0.require("actor"), requestID: try $0.require("request_id"),
                outcome: try $0.require("outcome"), previousHash: try $0.require("previous_hash", as: ByteA.self).bytes,
                hash: try $0.require("hash", as: ByteA.self).bytes)
        }
    }

    /// Per project, the entries from the anchor up to the first young one (in chain order: times from several
    /// replicas' clocks are not quite monotonic), then the anchor moves to the last one dropped.
    func purge(before: Date, at: Date, limit: Int) async throws -> Int {
        var dropped = 0
        for row in try await db.query("SELECT project_id FROM audit_chains ORDER BY project_id") {
            let project: String = try row.require("project_id")
            dropped += try await db.transaction { c in
                guard
                    let chain = try await c.query(
                        "SELECT anchor_seq, head_seq FROM audit_chains WHERE project_id = \(project) FOR UPDATE"
                    ).first
                else { return 0 }
                let anchor: Int64 = try chain.require("anchor_seq")
                let head: Int64 = try chain.require("head_seq")
                let end = min(head, anchor + Int64(max(0, limit - dropped)))
                guard end > anchor else { return 0 }
                let young: Int64? = try await c.query(
                    """
                    SELECT seq FROM audit_log WHERE project_id = \(project) AND seq > \(anchor) AND seq <= \(end)
                      AND at >= \(before) ORDER BY seq LIMIT 1
                    """
                ).first?.require("seq")
                let last = (young ?? end + 1) - 1
                guard last > anchor,
                    let tail = try await c.query(
                        "SELECT hash FROM audit_log WHERE project_id = \(project) AND seq = \(last)"
                    ).first
                else { return 0 }
                // The guard (migration 23) lets entries go only in a transaction that says it is this purge.
                try await c.query("SELECT set_config('registry.audit_purge', 'on', true)::text AS purging")
                let removed = try await c.query(
                    "DELETE FROM audit_log WHERE project_id = \(project) AND seq > \(anchor) AND seq <= \(last)")
                try await c.query(
                    """
                    UPDATE audit_chains SET anchor_seq = \(last), anchor_hash = \(try tail.require("hash", as: ByteA.self))
                    WHERE project_id = \(project)
                    """)
                try await Self.append(AuditService.purgeRecord(projectID: project, anchorSeq: last, at: at), on: c)
                return removed.affectedRows
            }
            if dropped >= limit { break }
        }
        return dropped
    }

    func chainedProjects() async throws -> [String] {
        try await db.query(
            "SELECT project_id FROM audit_chains UNION SELECT project_id FROM audit_pending ORDER BY 1"
        ).map { try $0.require("project_id") }
    }
}
