import Foundation
import Postgres
import Registry

/// ``MaintenanceStore`` on PostgreSQL: purge, the registration-expiry report, job bookkeeping and gauges.
struct PostgresMaintenanceStore: MaintenanceStore {
    let db: Database
    static let purgeLock: Int64 = 0x7472_7075_7267_6501

    /// At most `limit` deletion records a call, chosen by an index each (`deletions_deadline`, `deletions_completed`);
    /// everything left of them goes in one statement per table, not one per record: the outbox has no index by FID
    /// (every write appends to it and the relay empties it each second), so a statement per record read it whole each
    /// time (14 ms a record with a 68,000-row backlog in bench/scale.sh).
    /// Takes the purge's lock for the transaction; false when another replica holds it.
    private static func purgeLocked(_ c: PostgresConnection) async throws -> Bool {
        try await c.query("SELECT pg_try_advisory_xact_lock(\(Self.purgeLock)) AS ok").first?.require(
            "ok", as: Bool.self) == true
    }

    func purge(at now: Date, completedBefore: Date, limit: Int) async throws -> Int {
        try await db.transaction { c in
            guard try await Self.purgeLocked(c) else { return 0 }
            let due = try await c.query(
                """
                SELECT id FROM (
                    (SELECT id FROM deletions WHERE deadline <= \(now) ORDER BY deadline LIMIT \(limit))
                    UNION
                    (SELECT id FROM deletions WHERE completed_at <= \(completedBefore) ORDER BY completed_at
                     LIMIT \(limit))) d
                LIMIT \(limit)
                """
            ).map { try $0.require("id", as: Int64.self) }
            let ids = TextArray(due.map(String.init)).postgresText
            // Locked in id order before anything is read from them, as an acknowledgement locks its deletion before
            // its delivery: one that commits meanwhile is waited for, so the overdue receipt and the person's receipt
            // below tell the same outcome (and the two never wait on each other).
            try await c.query("SELECT 1 FROM deletions WHERE id = ANY(\(ids)::bigint[]) ORDER BY id FOR UPDATE")
            try await c.query(
                """
                INSERT INTO overdue_deletions (deletion_id, project_id, fid_hmac, reason, requested_at, deadline, services, purged_at)
                SELECT del.id, del.project_id, del.fid_hmac, del.reason, del.requested_at, del.deadline,
                       array_agg(d.service ORDER BY d.service), \(now)
                FROM deletions del JOIN deletion_deliveries d ON d.deletion_id = del.id
                    AND d.state IN (\(DeliveryState.pending.rawValue), \(DeliveryState.accepted.rawValue))
                WHERE del.id = ANY(\(ids)::bigint[]) AND del.deadline <= \(now) GROUP BY del.id
                ON CONFLICT DO NOTHING
                """)
            // A person's receipt outlives the deletion records it was made of: each one's outcome is copied to it.
            try await c.query(
                """
                UPDATE erasure_members m SET
                    purged_state = CASE WHEN del.completed_at IS NOT NULL THEN 'done' ELSE 'overdue' END,
                    completed_at = del.completed_at,
                    services = (SELECT coalesce(jsonb_agg(jsonb_build_object('service', d.service, 'state', d.state,
                            'attempts', d.attempts, 'acknowledgedAt', extract(epoch FROM d.acknowledged_at))
                            ORDER BY d.service), '[]'::jsonb)::text
                        FROM deletion_deliveries d WHERE d.deletion_id = del.id)
                FROM deletions del WHERE m.deletion_id = del.id AND del.id = ANY(\(ids)::bigint[])
                """)
            let purged = try await c.query(
                """
                WITH gone AS (DELETE FROM deletions WHERE id = ANY(\(ids)::bigint[]) RETURNING project_id, fid, fid_hmac),
                events AS (
                    DELETE FROM events e USING gone WHERE e.project_id = gone.project_id AND e.fid = gone.fid),
                outbox AS (
                    DELETE FROM event_outbox o USING gone WHERE o.project_id = gone.project_id AND o.fid = gone.fid),
                -- The audit log keeps each entry and its keyed hash; the FID in clear goes, a bounded number of
                -- entries a round (``scrubAudit``).
                -- Only subjects with clear text in the log are queued (most deleted installations have none).
                scrubs AS (
                    INSERT INTO audit_scrubs (project_id, digest, next_at) SELECT project_id, fid_hmac, \(now) FROM gone
                    WHERE \(unsafeSQL: Self.hasClearText("gone.project_id", "gone.fid_hmac"))
                    ON CONFLICT DO NOTHING)
                SELECT count(*)::int AS n FROM gone
                """)
            return try purged.first?.require("n", as: Int.self) ?? 0
        }
    }

    func finishPurge(at now: Date, eventsBefore: Date) async throws {
        try await db.transaction { c in
            guard try await Self.purgeLocked(c) else { return }
            // A person whose erasure has no deletion record left leaves the audit log's clear text too.
            try await c.query(
                """
                WITH due AS (
                    SELECT e.project_id, e.erasure_id, e.user_hmac FROM erasures e WHERE e.scrubbed_at IS NULL
                      AND NOT EXISTS (SELECT 1 FROM erasure_members m JOIN deletions d ON d.id = m.deletion_id
                          WHERE m.project_id = e.project_id AND m.erasure_id = e.erasure_id)
                ), scrubs AS (
                    INSERT INTO audit_scrubs (project_id, digest, next_at) SELECT project_id, user_hmac, \(now) FROM due
                    WHERE \(unsafeSQL: Self.hasClearText("due.project_id", "due.user_hmac"))
                    ON CONFLICT DO NOTHING
                )
                UPDATE erasures e SET scrubbed_at = \(now) FROM due
                WHERE e.project_id = due.project_id AND e.erasure_id = due.erasure_id
                """)
            try await Self.dropEvents(before: eventsBefore, on: c)
            try await Self.scrubAudit(at: now, on: c)
            // The completions counted since the last round (migration 15) join the count, this purge's included.
            try await c.query(
                """
                WITH folded AS (DELETE FROM deletion_count_changes RETURNING done)
                UPDATE deletion_counts SET done = deletion_counts.done + (SELECT coalesce(sum(done), 0) FROM folded)
                """)
        }
    }

    /// A round clears the clear text of at most ``scrubbedPerRound`` audit entries, at most ``scrubbedPerSubject`` of
    /// one subject (a purged installation, an erased person), the subjects waiting longest first; a subject with entries
    /// left goes to the back of the queue, and one with none left leaves it. So a round's cost is bounded whatever a
    /// tenant wrote about one of its subjects (each refused call is an entry too), and that subject's clear text leaves
    /// over the rounds its own entries take, while the others' leave in their turn.
    static let scrubbedPerRound = 20_000
    static let scrubbedPerSubject = 2_000
    /// Subjects looked at a round: queued ones with no entries left cost an index probe each.
    static let scrubbedSubjects = 5_000

    /// Whether the audit log still names the subject (`project`, `digest`: SQL expressions) in clear: an index probe
    /// of `audit_log_subject`.
    static func hasClearText(_ project: String, _ digest: String) -> String {
        """
        EXISTS (SELECT 1 FROM audit_log a WHERE a.project_id = \(project) AND a.subject AND a.target_digest = \(digest)
            AND a.target IS NOT NULL)
        """
    }

    static func scrubAudit(at now: Date, on c: PostgresConnection) async throws {
        let due = """
            SELECT project_id, digest FROM audit_scrubs ORDER BY next_at, project_id, digest
            LIMIT \(scrubbedSubjects)
            """
        // The entries are read subject by subject in the queue's order (a nested loop over the queue's first rows)
        // until the round's count is reached: no ORDER BY, which would read every subject's entries to sort them.
        let touched = try await c.query(
            PostgresQuery(
                unsafeSQL: """
                    WITH due AS (\(due) FOR UPDATE),
                    entries AS (
                        SELECT due.project_id, e.seq FROM due CROSS JOIN LATERAL (
                            SELECT a.seq FROM audit_log a WHERE a.project_id = due.project_id AND a.subject
                              AND a.target_digest = due.digest AND a.target IS NOT NULL
                            LIMIT \(scrubbedPerSubject)) e
                        LIMIT \(scrubbedPerRound)
                    ), cleared AS (
                        UPDATE audit_log a SET target = NULL FROM entries
                        WHERE a.project_id = entries.project_id AND a.seq = entries.seq
                        RETURNING a.project_id, a.target_digest
                    )
                    SELECT DISTINCT project_id, target_digest::text AS digest FROM cleared
                    """, binds: []))
        // This transaction sees its own clearing: the subjects looked at with nothing left leave the queue.
        try await c.query(
            PostgresQuery(
                unsafeSQL: """
                    DELETE FROM audit_scrubs s WHERE (s.project_id, s.digest) IN (\(due))
                      AND NOT \(hasClearText("s.project_id", "s.digest"))
                    """, binds: []))
        guard !touched.isEmpty else { return }
        // Those with entries left go behind every subject queued until now.
        // (Digests travel as bytea's text form, `\x…`, and are read back by its cast.)
        let projects = try touched.map { try $0.require("project_id", as: String.self) }
        let digests = try touched.map { try $0.require("digest", as: String.self) }
        try await c.query(
            """
            UPDATE audit_scrubs s SET next_at = \(now)::timestamptz + interval '1 millisecond'
            FROM unnest(\(TextArray(projects))::text[], \(TextArray(digests))::text[]) AS t(project_id, digest)
            WHERE s.project_id = t.project_id AND s.digest = t.digest::bytea
            """)
    }

    /// At most this many feed events are dropped a round (a round is `JOBS_INTERVAL_SECONDS`).
    static let eventsDroppedPerRound = 100_000

    /// Drops the oldest feed events, those before the first one at or after `before` in feed order.
    ///
    /// Events are numbered as they are relayed, and their times almost follow the numbers (a long transaction's event
    /// can be older than one numbered before it). So the feed is read from its head in `seq` order, up to its first
    /// young event and at most ``eventsDroppedPerRound`` numbers on: that costs the rows dropped and one more, not the
    /// table. (The filter on `created_at` it replaced has no index: it read every event every round, 73 ms a round over
    /// 870,000 events in the bench, growing with the retention.) A young event is never dropped; an old one numbered
    /// after a young one goes in a later round.
    static func dropEvents(before: Date, on c: PostgresConnection) async throws {
        guard
            let head = try await c.query(
                "SELECT seq, created_at < \(before) AS due FROM events ORDER BY seq LIMIT 1"
            ).first,
            try head.require("due", as: Bool.self)
        else { return }
        let first: Int64 = try head.require("seq")
        let end = first + Int64(eventsDroppedPerRound)
        try await c.query(
            """
            DELETE FROM events WHERE seq >= \(first) AND seq < coalesce((
                SELECT seq FROM events WHERE seq >= \(first) AND seq < \(end) AND created_at >= \(before)
                ORDER BY seq LIMIT 1), \(end))
            """)
    }

    func reportExpiredRegistrations(before cutoff: Date, limit: Int) async throws -> Int {
        try await db.query(
            """
            WITH due AS (
                SELECT project_id, fid FROM registrations WHERE NOT expired_reported AND refreshed_at < \(cutoff)
                LIMIT \(limit) FOR UPDATE SKIP LOCKED
            ), marked AS (
                UPDATE registrations r SET expired_reported = true FROM due
                WHERE r.project_id = due.project_id AND r.fid = due.fid RETURNING r.project_id, r.fid
            )
            INSERT INTO event_outbox (project_id, type, fid)
            SELECT project_id, \(EventType.registrationExpired.rawValue), fid FROM marked
            """
        ).affectedRows
    }

    func recordRun(job: String, at: Date, durationSeconds: Double, processed: Int) async throws {
        try await db.query(
            """
            INSERT INTO job_runs (job, last_run_at, duration_ms, processed)
            VALUES (\(job), \(at), \(durationSeconds * 1000), \(processed))
            ON CONFLICT (job) DO UPDATE SET last_run_at = excluded.last_run_at, duration_ms = excluded.duration_ms,
                processed = excluded.processed
            """)
    }

    func databaseNow() async throws -> Date {
        guard let row = try await db.query("SELECT now() AS now").first else {
            throw RegistryError(.internal, "SELECT now() returned no row")
        }
        return try row.require("now")
    }

    func registrationCounts(staleBefore: Date, expiredBefore: Date) async throws -> [String: Int] {
        guard
            let row = try await db.query(
                """
                SELECT count(*) FILTER (WHERE state = 'active' AND refreshed_at >= \(staleBefore))::int AS fresh,
                       count(*) FILTER (WHERE state = 'active' AND refreshed_at < \(staleBefore)
                                        AND refreshed_at >= \(expiredBefore))::int AS stale,
                       count(*) FILTER (WHERE state = 'active' AND refreshed_at < \(expiredBefore))::int AS expired,
                       count(*) FILTER (WHERE state = 'disabled')::int AS disabled,
                       count(*) FILTER (WHERE state = 'retired')::int AS retired
                FROM registrations
                """
            ).first
        else { return [:] }
        var counts: [String: Int] = [:]
        for name in ["fresh", "stale", "expired", "disabled", "retired"] { counts[name] = try row.require(name) }
        return counts
    }

    func gauges(at now: Date) async throws -> RegistryGauges {
        var gauges = RegistryGauges(deletions: [:], oldestUndeliveredSeconds: 0, services: [], jobs: [])
        // The open deletions through the index on `completed_at` (they are few), the completed ones from the count kept
        // by migration 15's triggers: not a read of every deletion kept for 30 days every round.
        if let counts = try await db.query(
            """
            SELECT count(*) FILTER (WHERE deadline > \(now)) AS pending,
                   count(*) FILTER (WHERE deadline <= \(now)) AS late,
                   ((SELECT coalesce(sum(done), 0) FROM deletion_counts)
                     + (SELECT coalesce(sum(done), 0) FROM deletion_count_changes))::bigint AS done,
                   (SELECT count(*) FROM overdue_deletions) AS purged_overdue,
                   extract(epoch FROM \(now)::timestamptz - min(requested_at)) AS oldest
            FROM deletions WHERE completed_at IS NULL
            """
        ).first {
            gauges.deletions[.pending] = try counts.require("pending", as: Int.self)
            gauges.deletions[.done] = try counts.require("done", as: Int.self)
            gauges.deletions[.overdue] =
                try counts.require("late", as: Int.self) + (try counts.require("purged_overdue", as: Int.self))
            gauges.oldestUndeliveredSeconds = try counts.decode("oldest", as: Double.self) ?? 0
        }
        gauges.services = try await db.query("SELECT * FROM delivery_counters ORDER BY project_id, service").map {
            RegistryGauges.ServiceCounters(
                projectID: try $0.require("project_id"), service: try $0.require("service"),
                attempts: try $0.require("attempts"), failures: try $0.require("failures"))
        }
        gauges.jobs = try await db.query("SELECT * FROM job_runs ORDER BY job").map {
            RegistryGauges.JobRun(
                job: try $0.require("job"), lastRun: try $0.require("last_run_at"),
                durationSeconds: try $0.require("duration_ms", as: Double.self) / 1000)
        }
        if let outbox = try await db.query(
            """
            SELECT count(*)::int AS n, coalesce(extract(epoch FROM \(now)::timestamptz - min(created_at)), 0)::float8 AS oldest
            FROM event_outbox
            """
        ).first {
            gauges.outboxRows = try outbox.require("n")
            gauges.outboxOldestSeconds = max(0, try outbox.require("oldest"))
        }
        gauges.signingKeyAgeSeconds = try await db.query(
            """
            SELECT extract(epoch FROM \(now)::timestamptz - max(created_at))::float8 AS age FROM signing_keys
            WHERE retired_at IS NULL
            """
        ).first?.decode("age")
        gauges.trippedBreakers = try await db.query(
            "SELECT project_id, channel FROM feedback_breakers WHERE tripped ORDER BY project_id, channel"
        ).map { RegistryGauges.TrippedBreaker(projectID: try $0.require("project_id"), channel: try $0.require("channel")) }
        return gauges
    }
}
