import Foundation
import Postgres
import Registry

/// ``FeedbackStore`` on PostgreSQL: `registry_apply_feedback` (migration 21) applies a whole batch in one statement.
struct PostgresFeedbackStore: FeedbackStore {
    let db: Database

    func apply(projectID: String, results: [FeedbackResult], policy: FeedbackPolicy, at: Date) async throws
        -> [FeedbackAction]
    {
        let rows = try await db.query(
            """
            SELECT ord, action FROM registry_apply_feedback(\(projectID),
                \(TextArray(results.map(\.token)))::text[], \(TextArray(results.map(\.outcome.channel.rawValue)))::text[],
                \(TextArray(results.map(\.outcome.feedbackClass.rawValue)))::text[],
                \(TextArray(results.map(\.outcome.code)))::text[],
                \(TextArray(results.map { $0.outcome.invalidSince?.postgresText ?? "" }))::text[],
                \(at)::timestamptz, \(policy.breakerShare)::float8, \(policy.breakerMinimum)::int,
                \(policy.window)::float8)
            """)
        var actions = [FeedbackAction](repeating: .ignored, count: results.count)
        for row in rows {
            let ord: Int = try row.require("ord")
            guard (1...results.count).contains(ord) else {
                throw RegistryError(.internal, "registry_apply_feedback answered position \(ord)")
            }
            actions[ord - 1] = try row.require("action", as: FeedbackAction.self)
        }
        return actions
    }

    func clearBreaker(projectID: String, channel: FeedbackChannel, confirm: Bool, at: Date) async throws
        -> BreakerClearance?
    {
        try await db.transaction { c in
            guard
                try await c.query(
                    """
                    SELECT 1 FROM feedback_breakers
                    WHERE project_id = \(projectID) AND channel = \(channel.rawValue) AND tripped FOR UPDATE
                    """
                ).first != nil
            else { return nil }
            var released = 0
            var retired = 0
            if confirm {
                retired = try await c.query(
                    """
                    WITH done AS (
                        UPDATE registrations SET state = 'retired', retired_at = \(at), retired_reason = quarantine_reason,
                            retired_channel = quarantine_channel, invalid_since = \(at), quarantined_at = NULL,
                            quarantine_reason = NULL, quarantine_channel = NULL, quarantined_by_breaker = false
                        WHERE project_id = \(projectID) AND quarantine_channel = \(channel.rawValue)
                          AND quarantined_by_breaker
                        RETURNING fid, retired_reason
                    )
                    INSERT INTO event_outbox (project_id, type, fid, data)
                    SELECT \(projectID), \(EventType.registrationInvalidated.rawValue), fid,
                        json_build_object('reason', retired_reason, 'class', 'dead', 'channel', \(channel.rawValue)::text,
                            'confirmedBy', 'operator')::text
                    FROM done
                    """
                ).affectedRows
            } else {
                released = try await c.query(
                    """
                    UPDATE registrations SET quarantined_at = NULL, quarantine_reason = NULL, quarantine_channel = NULL,
                        quarantined_by_breaker = false
                    WHERE project_id = \(projectID) AND quarantine_channel = \(channel.rawValue) AND quarantined_by_breaker
                    """
                ).affectedRows
            }
            try await c.query(
                """
                UPDATE feedback_breakers SET tripped = false, cleared_at = \(at)
                WHERE project_id = \(projectID) AND channel = \(channel.rawValue)
                """)
            // The window starts again: what tripped it is behind the operator now.
            try await c.query(
                "DELETE FROM feedback_stats WHERE project_id = \(projectID) AND channel = \(channel.rawValue)")
            return BreakerClearance(released: released, retired: retired)
        }
    }

    func report(projectID: String, windowStart: Date) async throws -> HygieneReport {
        var report = HygieneReport()
        for row in try await db.query(
            "SELECT state, count(*)::int AS n FROM registrations WHERE project_id = \(projectID) GROUP BY state")
        {
            report.byState[try row.require("state")] = try row.require("n")
        }
        report.quarantined =
            try await db.query(
                """
                SELECT count(*)::int AS n FROM registrations WHERE project_id = \(projectID) AND quarantined_at IS NOT NULL
                """
            ).first?.require("n") ?? 0
        for row in try await db.query(
            """
            SELECT retired_reason, count(*)::int AS n FROM registrations
            WHERE project_id = \(projectID) AND state = 'retired' GROUP BY retired_reason
            """)
        {
            report.retiredByReason[try row.decode("retired_reason") ?? "unknown"] = try row.require("n")
        }
        for row in try await db.query(
            """
            SELECT channel, class, sum(n)::int AS n FROM feedback_stats
            WHERE project_id = \(projectID) AND minute > \(windowStart) GROUP BY channel, class
            """)
        {
            let channel = try row.require("channel", as: FeedbackChannel.self)
            report.recent[channel, default: [:]][try row.require("class", as: FeedbackClass.self)] = try row.require("n")
        }
        for row in try await db.query(
            "SELECT * FROM feedback_breakers WHERE project_id = \(projectID) ORDER BY channel")
        {
            report.breakers.append(
                BreakerState(
                    channel: try row.require("channel", as: FeedbackChannel.self), tripped: try row.require("tripped"),
                    trippedAt: try row.decode("tripped_at"), clearedAt: try row.decode("cleared_at"),
                    failing: try row.require("failing"), results: try row.require("results")))
        }
        return report
    }

    func purgeRetired(before cutoff: Date, statsBefore: Date, limit: Int) async throws -> Int {
        try await db.query("DELETE FROM feedback_stats WHERE minute < \(statsBefore)")
        return try await db.query(
            """
            DELETE FROM registrations d WHERE (d.project_id, d.fid) IN (
                SELECT project_id, fid FROM registrations
                WHERE state = 'retired' AND retired_at < \(cutoff) ORDER BY retired_at LIMIT \(limit)
            )
            AND d.state = 'retired' AND d.retired_at < \(cutoff)
            """
        ).affectedRows
    }
}
