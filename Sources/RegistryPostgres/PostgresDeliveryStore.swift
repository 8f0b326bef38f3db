import Foundation
import Postgres
import Registry

/// ``DeliveryStore`` on PostgreSQL: the `deletion_deliveries` outbox, claimed with `FOR UPDATE SKIP LOCKED`.
struct PostgresDeliveryStore: DeliveryStore {
    let db: Database

    func claimDue(at now: Date, leaseUntil: Date, limit: Int, perProject: Int, excluding: Set<String>) async throws
        -> [ClaimedDelivery]
    {
        // Each project's most overdue deliveries, at most `perProject` of them (an index range scan a project, on
        // deletion_deliveries_project_due), then the most overdue of those across projects.
        let rows = try await db.query(
            """
            WITH due AS (
                SELECT x.deletion_id, x.service FROM (
                    -- Projects with notices in flight are left out before their rows are looked at (or locked).
                    SELECT project_id FROM projects WHERE project_id <> ALL(\(TextArray(excluding.sorted()))::text[])
                ) p CROSS JOIN LATERAL (
                    SELECT d.deletion_id, d.service, d.next_attempt_at FROM deletion_deliveries d
                    WHERE d.project_id = p.project_id AND d.state = \(DeliveryState.pending.rawValue)
                      AND d.next_attempt_at <= \(now)
                    ORDER BY d.next_attempt_at LIMIT \(perProject) FOR UPDATE SKIP LOCKED
                ) x
                ORDER BY x.next_attempt_at LIMIT \(limit)
            ), claimed AS (
                UPDATE deletion_deliveries d SET next_attempt_at = \(leaseUntil), attempts = d.attempts + 1
                FROM due WHERE d.deletion_id = due.deletion_id AND d.service = due.service
                RETURNING d.deletion_id, d.service, d.delivery_id, d.attempts
            )
            SELECT c.*, del.project_id, del.fid, del.reason, del.requested_at, del.deadline, del.traceparent, ls.endpoint,
                ls.secret,
                CASE WHEN ls.previous_secret_until > \(now) THEN ls.previous_secret END AS previous_secret
            FROM claimed c JOIN deletions del ON del.id = c.deletion_id
            JOIN linked_services ls ON ls.project_id = del.project_id AND ls.name = c.service
            """)
        var claimed: [ClaimedDelivery] = []
        var unreadable: [(id: Int64, service: String, error: String)] = []
        for row in rows {
            do {
                claimed.append(try claim(row))
            } catch {
                // A row that cannot be read is this delivery's problem alone: recorded on it, the rest go on.
                guard let id: Int64 = try? row.require("deletion_id"), let service: String = try? row.require("service")
                else { continue }
                unreadable.append((id, service, String(describing: error)))
            }
        }
        for (id, service, error) in unreadable {
            _ = try? await db.query(
                """
                UPDATE deletion_deliveries SET last_error = \(String(error.prefix(500)))
                WHERE deletion_id = \(id) AND service = \(service)
                """)
        }
        return claimed
    }

    private func claim(_ row: PostgresRow) throws -> ClaimedDelivery {
        let projectID: String = try row.require("project_id")
        let service: String = try row.require("service")
        let context = PostgresDeletionStore.context(projectID: projectID, name: service)
        var secrets: [String] = []
        var unsendable: String?
        do {
            secrets = try ([try row.require("secret")] + [try row.decode("previous_secret", as: String.self)].compactMap { $0 })
                .map { try db.open($0, context: context) }
        } catch let error as RegistryError {
            unsendable = error.message
        }
        return ClaimedDelivery(
            deletionID: try row.require("deletion_id"), service: service,
            deliveryID: try row.require("delivery_id"), attempts: try row.require("attempts"),
            endpoint: try row.require("endpoint"), secrets: secrets, projectID: projectID,
            fid: try row.require("fid"), reason: try row.require("reason", as: DeletionReason.self),
            requestedAt: try row.require("requested_at"), deadline: try row.require("deadline"),
            unsendable: unsendable, traceparent: try row.decode("traceparent"))
    }

    func record(_ item: ClaimedDelivery, outcome: DeliveryOutcome, at now: Date) async throws {
        try await db.transaction { c in
            // The service's row first, as a deletion and a removal take it first: a removal under way is waited
            // for (then its delivery is abandoned and nothing is counted), and one that follows waits for this.
            let live = try await c.query(
                """
                SELECT 1 AS live FROM linked_services WHERE project_id = \(item.projectID) AND name = \(item.service)
                FOR KEY SHARE
                """
            ).first != nil
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
                try await PostgresDeletionStore.lockDeletion(item.deletionID, on: c)
                try await c.query(
                    """
                    UPDATE deletion_deliveries SET state = \(DeliveryState.acknowledged.rawValue), acknowledged_at = \(now),
                        last_error = NULL,
                        rekeyed_by_project_at = (SELECT rekeyed_by_project_at FROM linked_services
                            WHERE project_id = \(item.projectID) AND name = \(item.service))
                    WHERE deletion_id = \(item.deletionID) AND service = \(item.service)
                      AND state IN (\(DeliveryState.pending.rawValue), \(DeliveryState.accepted.rawValue))
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
            guard live else { return }
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
