import Foundation
import Postgres
import Registry

/// ``DeliveryStore`` on PostgreSQL: the `deletion_deliveries` outbox, claimed with `FOR UPDATE SKIP LOCKED`.
struct PostgresDeliveryStore: DeliveryStore {
    let db: Database

    func claimDue(at now: Date, leaseUntil: Date, limit: Int) async throws -> [ClaimedDelivery] {
        try await db.query(
            """
            WITH due AS (
                SELECT deletion_id, service FROM deletion_deliveries
                WHERE state = \(DeliveryState.pending.rawValue) AND next_attempt_at <= \(now)
                ORDER BY next_attempt_at LIMIT \(limit) FOR UPDATE SKIP LOCKED
            ), claimed AS (
                UPDATE deletion_deliveries d SET next_attempt_at = \(leaseUntil), attempts = d.attempts + 1
                FROM due WHERE d.deletion_id = due.deletion_id AND d.service = due.service
                RETURNING d.deletion_id, d.service, d.delivery_id, d.attempts
            )
            SELECT c.*, del.project_id, del.fid, del.reason, del.requested_at, del.deadline, ls.endpoint, ls.secret,
                CASE WHEN ls.previous_secret_until > \(now) THEN ls.previous_secret END AS previous_secret
            FROM claimed c JOIN deletions del ON del.id = c.deletion_id
            JOIN linked_services ls ON ls.project_id = del.project_id AND ls.name = c.service
            """
        ).map { row in
            let projectID: String = try row.require("project_id")
            let service: String = try row.require("service")
            let context = PostgresDeletionStore.context(projectID: projectID, name: service)
            return ClaimedDelivery(
                deletionID: try row.require("deletion_id"), service: try row.require("service"),
                deliveryID: try row.require("delivery_id"), attempts: try row.require("attempts"),
                endpoint: try row.require("endpoint"),
                secrets: try
                    ([try row.require("secret")]
                    + [try row.decode("previous_secret", as: String.self)].compactMap { $0 })
                    .map { try db.open($0, context: context) },
                projectID: try row.require("project_id"), fid: try row.require("fid"),
                reason: try row.require("reason", as: DeletionReason.self),
                requestedAt: try row.require("requested_at"),
                deadline: try row.require("deadline"))
        }
    }

    func record(_ item: ClaimedDelivery, outcome: DeliveryOutcome, at now: Date) async throws {
        try await db.transaction { c in
            var failed = false
            switch outcome {
            case .accepted:
                try await c.query(
                    """
                    UPDATE deletion_deliveries SET state = \(DeliveryState.accepted.rawValue), last_error = NULL
                    WHERE deletion_id = \(item.deletionID) AND service = \(item.service)
                      AND state = \(DeliveryState.pending.rawValue)
                    """)
            case .acknowledged:
                try await c.query(
                    """
                    UPDATE deletion_deliveries SET state = \(DeliveryState.acknowledged.rawValue), acknowledged_at = \(now),
                        last_error = NULL
                    WHERE deletion_id = \(item.deletionID) AND service = \(item.service)
                    """)
                try await PostgresDeletionStore.completeIfDone(item.deletionID, at: now, on: c)
            case let .failed(reason, retryAt):
                failed = true
                try await c.query(
                    """
                    UPDATE deletion_deliveries SET last_error = \(reason), next_attempt_at = \(retryAt)
                    WHERE deletion_id = \(item.deletionID) AND service = \(item.service)
                      AND state = \(DeliveryState.pending.rawValue)
                    """)
            }
            try await c.query(
                """
                INSERT INTO delivery_counters (project_id, service, attempts, failures)
                VALUES (\(item.projectID), \(item.service), 1, \(failed ? 1 : 0))
                ON CONFLICT (project_id, service) DO UPDATE SET attempts = delivery_counters.attempts + 1,
                    failures = delivery_counters.failures + excluded.failures
                """)
        }
    }
}
