import Crypto
import Foundation
import JSON
import Postgres

/// The background jobs. Every replica runs them; each claims its work with `FOR UPDATE SKIP LOCKED` or an
/// advisory lock, so replicas never do the same work twice, and a replica that dies mid-job leaves nothing half
/// done (claims are leases; everything else is one transaction). All time comes from the injected clock.
public struct Jobs: Sendable {
    let pool: PostgresPool
    let deletions: DeletionService
    let installations: InstallationService
    let transport: any DeliveryTransport
    let freshness: Freshness
    public var clock: any Clock { deletions.clock }

    static let purgeLock: Int64 = 0x7472_7075_7267_6501
    static let expireLock: Int64 = 0x7472_6578_7069_7265
    static let relayLock: Int64 = 0x7472_7265_6c61_7901

    public init(
        pool: PostgresPool, deletions: DeletionService, installations: InstallationService,
        transport: any DeliveryTransport,
        freshness: Freshness = Freshness()
    ) {
        self.freshness = freshness
        self.pool = pool
        self.deletions = deletions
        self.installations = installations
        self.transport = transport
    }

    /// Runs every job once.
    ///
    /// - Returns: what each job processed.
    @discardableResult
    public func runAll() async throws -> [String: Int] {
        var done: [String: Int] = [:]
        done["expire"] = try await timed("expire") { try await expireIdle() }
        done["expire-registrations"] = try await timed("expire-registrations") {
            try await reportExpiredRegistrations()
        }
        done["deliver"] = try await timed("deliver") { try await deliverDue() }
        done["purge"] = try await timed("purge") { try await purge() }
        done["relay"] = try await timed("relay") { try await relayEvents() }
        return done
    }

    private func timed(_ job: String, _ body: () async throws -> Int) async throws -> Int {
        let started = ContinuousClock.now
        let processed = try await body()
        let elapsed = ContinuousClock.now - started
        let ms = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        try await pool.query(
            """
            INSERT INTO job_runs (job, last_run_at, duration_ms, processed) VALUES (\(job), \(clock.now()), \(ms), \(processed))
            ON CONFLICT (job) DO UPDATE SET last_run_at = excluded.last_run_at, duration_ms = excluded.duration_ms,
                processed = excluded.processed
            """)
        return processed
    }

    // MARK: - Deliver

    private struct Claimed: Sendable {
        let deletionID: Int64
        let service: String
        let deliveryID: String
        let attempts: Int
        let endpoint: String
        let secret: String
        let body: [UInt8]
        let projectID: String
    }

    /// Delivers due deletion notices (up to `batch`), each under a lease.
    public func deliverDue(batch: Int = 50) async throws -> Int {
        let now = clock.now()
        let rows = try await pool.query(
            """
            WITH due AS (
                SELECT deletion_id, service FROM deletion_deliveries
                WHERE state = 'pending' AND next_attempt_at <= \(now)
                ORDER BY next_attempt_at LIMIT \(batch) FOR UPDATE SKIP LOCKED
            ), claimed AS (
                UPDATE deletion_deliveries d SET next_attempt_at = \(now.addingTimeInterval(deletions.policy.lease)),
                    attempts = d.attempts + 1
                FROM due WHERE d.deletion_id = due.deletion_id AND d.service = due.service
                RETURNING d.deletion_id, d.service, d.delivery_id, d.attempts
            )
            SELECT c.*, del.project_id, del.fid, del.reason, del.requested_at, del.deadline, ls.endpoint, ls.secret
            FROM claimed c JOIN deletions del ON del.id = c.deletion_id
            JOIN linked_services ls ON ls.project_id = del.project_id AND ls.name = c.service
            """)
        let claimed: [Claimed] = try rows.map { row in
            let body: JSONValue = [
                "type": "installation.deleted", "project": .string(try row.require("project_id")),
                "fid": .string(try row.require("fid")),
                "reason": .string(try row.require("reason")),
                "requestTime": .string(Timestamp.rfc3339(try row.require("requested_at"))),
                "deadline": .string(Timestamp.rfc3339(try row.require("deadline"))),
                "deliveryId": .string(try row.require("delivery_id")),
            ]
            return Claimed(
                deletionID: try row.require("deletion_id"), service: try row.require("service"),
                deliveryID: try row.require("delivery_id"), attempts: try row.require("attempts"),
                endpoint: try row.require("endpoint"), secret: try row.require("secret"), body: body.encoded(),
                projectID: try row.require("project_id"))
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, item) in claimed.enumerated() {
                if index >= 16 { try await group.next() }
                group.addTask { try await deliver(item) }
            }
            try await group.waitForAll()
        }
        return claimed.count
    }

    /// `Registry-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
    public static func signature(secret: String, timestamp: Int64, body: [UInt8]) -> String {
        let mac = HMACSHA256.authenticate(Array("\(timestamp).".utf8) + body, key: Array(secret.utf8))
        return "t=\(timestamp),v1=\(Hex.encode(mac))"
    }

    private func deliver(_ item: Claimed) async throws {
        let timestamp = Int64(Date().timeIntervalSince1970)
        let headers = [
            ("Content-Type", "application/json"),
            ("Registry-Signature", Jobs.signature(secret: item.secret, timestamp: timestamp, body: item.body)),
            ("Registry-Delivery", item.deliveryID),
        ]
        let response = await transport.post(endpoint: item.endpoint, body: item.body, headers: headers)
        let now = clock.now()
        try await pool.withTransaction { c in
            var failed = false
            switch response {
            case .status(202):
                try await c.query(
                    """
                    UPDATE deletion_deliveries SET state = 'accepted', last_error = NULL
                    WHERE deletion_id = \(item.deletionID) AND service = \(item.service) AND state = 'pending'
                    """)
            case let .status(code) where (200..<300).contains(code):
                try await c.query(
                    """
                    UPDATE deletion_deliveries SET state = 'acknowledged', acknowledged_at = \(now), last_error = NULL
                    WHERE deletion_id = \(item.deletionID) AND service = \(item.service)
                    """)
                try await DeletionService.completeIfDone(item.deletionID, at: now, on: c)
            default:
                failed = true
                let reason: String
                if case let .status(code) = response {
                    reason = "HTTP \(code)"
                } else if case let .failed(text) = response {
                    reason = text
                } else {
                    reason = "?"
                }
                try await c.query(
                    """
                    UPDATE deletion_deliveries SET last_error = \(String(reason.prefix(500))),
                        next_attempt_at = \(now.addingTimeInterval(deletions.policy.backoff(afterAttempts: item.attempts)))
                    WHERE deletion_id = \(item.deletionID) AND service = \(item.service) AND state = 'pending'
                    """)
            }
            try await c.query(
                """
                INSERT INTO delivery_counters (project_id, service, attempts, failures) VALUES (\(item.projectID), \(item.service), 1, \(failed ? 1 : 0))
                ON CONFLICT (project_id, service) DO UPDATE SET attempts = delivery_counters.attempts + 1,
                    failures = delivery_counters.failures + excluded.failures
                """)
        }
    }

    // MARK: - Purge

    /// Removes deletion records once every service acknowledged and the audit period passed, and everything left
    /// of a FID at its deadline; unacknowledged services are recorded as overdue by deletion id and FID hash.
    public func purge() async throws -> Int {
        let now = clock.now()
        return try await pool.withTransaction { c in
            guard
                try await c.query("SELECT pg_try_advisory_xact_lock(\(Jobs.purgeLock)) AS ok").first?.require(
                    "ok", as: Bool.self) == true
            else { return 0 }
            try await c.query(
                """
                INSERT INTO overdue_deletions (deletion_id, project_id, fid_hmac, reason, requested_at, deadline, services, purged_at)
                SELECT del.id, del.project_id, del.fid_hmac, del.reason, del.requested_at, del.deadline,
                       array_agg(d.service ORDER BY d.service), \(now)
                FROM deletions del JOIN deletion_deliveries d ON d.deletion_id = del.id AND d.state <> 'acknowledged'
                WHERE del.deadline <= \(now) GROUP BY del.id
                ON CONFLICT DO NOTHING
                """)
            let purged = try await c.query(
                """
                DELETE FROM deletions WHERE deadline <= \(now)
                   OR (completed_at IS NOT NULL AND completed_at <= \(now.addingTimeInterval(-deletions.policy.auditPeriod)))
                RETURNING project_id, fid
                """)
            for row in purged {
                let project: String = try row.require("project_id")
                let fid: String = try row.require("fid")
                try await c.query("DELETE FROM events WHERE project_id = \(project) AND fid = \(fid)")
                try await c.query("DELETE FROM event_outbox WHERE project_id = \(project) AND fid = \(fid)")
            }
            try await c.query(
                "DELETE FROM events WHERE created_at < \(now.addingTimeInterval(-deletions.policy.eventRetention))")
            return purged.count
        }
    }

    // MARK: - Expire

    /// Deletes installations idle longer than the expiry period (reason `inactivity`), one replica at a time.
    public func expireIdle(batch: Int = 500) async throws -> Int {
        let cutoff = clock.now().addingTimeInterval(-deletions.policy.expireAfter)
        return try await pool.withConnection { lockHolder in
            guard
                try await lockHolder.query("SELECT pg_try_advisory_lock(\(Jobs.expireLock)) AS ok").first?.require(
                    "ok", as: Bool.self) == true
            else { return 0 }
            var count = 0
            do {
                let idle = try await pool.query(
                    """
                    SELECT project_id, fid FROM installations WHERE last_seen_at < \(cutoff) ORDER BY last_seen_at LIMIT \(batch)
                    """)
                for row in idle {
                    let project = Project(id: try row.require("project_id"), number: 0)
                    if try await installations.delete(
                        project: project, fid: try row.require("fid"), reason: .inactivity)
                    {
                        count += 1
                    }
                }
            } catch {
                _ = try? await lockHolder.query("SELECT pg_advisory_unlock(\(Jobs.expireLock))")
                throw error
            }
            try await lockHolder.query("SELECT pg_advisory_unlock(\(Jobs.expireLock))")
            return count
        }
    }

    /// Reports each registration that passed the expiry age once, as `registration.expired` (expiry itself is
    /// decided when read, from the last refresh, so targeting never waits for this job).
    public func reportExpiredRegistrations(batch: Int = 1000) async throws -> Int {
        let cutoff = clock.now().addingTimeInterval(-freshness.expireAfter)
        return try await pool.query(
            """
            WITH due AS (
                SELECT project_id, fid FROM registrations WHERE NOT expired_reported AND refreshed_at < \(cutoff)
                LIMIT \(batch) FOR UPDATE SKIP LOCKED
            ), marked AS (
                UPDATE registrations r SET expired_reported = true FROM due
                WHERE r.project_id = due.project_id AND r.fid = due.fid RETURNING r.project_id, r.fid
            )
            INSERT INTO event_outbox (project_id, type, fid) SELECT project_id, 'registration.expired', fid FROM marked
            """
        ).affectedRows
    }

    // MARK: - Change feed

    /// Moves events of finished transactions from the outbox into the feed, numbering them in one go.
    public func relayEvents() async throws -> Int {
        try await pool.withTransaction { c in
            guard
                try await c.query("SELECT pg_try_advisory_xact_lock(\(Jobs.relayLock)) AS ok").first?.require(
                    "ok", as: Bool.self) == true
            else { return 0 }
            // Every transaction with an id below xmin has finished: its events can no longer appear later.
            let xmin: String = try await c.query("SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS x").first!
                .require("x")
            let moved = try await c.query(
                """
                WITH moved AS (DELETE FROM event_outbox WHERE tx < \(xmin)::xid8 RETURNING *)
                INSERT INTO events (project_id, type, fid, data, created_at)
                SELECT project_id, type, fid, data, created_at FROM moved ORDER BY id
                """)
            return moved.affectedRows
        }
    }

    /// Events of a project after `cursor`, in order.
    public func events(projectID: String, after cursor: Int64, limit: Int) async throws -> [(
        seq: Int64, type: String, fid: String, data: String?, time: Date
    )] {
        try await pool.query(
            """
            SELECT seq, type, fid, data, created_at FROM events WHERE project_id = \(projectID) AND seq > \(cursor) ORDER BY seq LIMIT \(limit)
            """
        ).map {
            (
                try $0.require("seq"), try $0.require("type"), try $0.require("fid"), try $0.decode("data"),
                try $0.require("created_at")
            )
        }
    }

    // MARK: - Metrics

    /// Deletion and job gauges in Prometheus text, read from the database so every replica reports the same.
    public func metricsLines() async throws -> [String] {
        let now = clock.now()
        var lines = ["# HELP registry_deletions Deletions by state.", "# TYPE registry_deletions gauge"]
        let counts = try await pool.query(
            """
            SELECT count(*) FILTER (WHERE completed_at IS NULL AND deadline > \(now)) AS pending,
                   count(*) FILTER (WHERE completed_at IS NOT NULL) AS done,
                   count(*) FILTER (WHERE completed_at IS NULL AND deadline <= \(now)) AS late,
                   (SELECT count(*) FROM overdue_deletions) AS purged_overdue,
                   extract(epoch FROM \(now)::timestamptz - min(requested_at) FILTER (WHERE completed_at IS NULL)) AS oldest
            FROM deletions
            """
        ).first
        if let counts {
            lines.append("registry_deletions{state=\"pending\"} \(try counts.require("pending", as: Int.self))")
            lines.append("registry_deletions{state=\"done\"} \(try counts.require("done", as: Int.self))")
            let overdue =
                try counts.require("late", as: Int.self) + (try counts.require("purged_overdue", as: Int.self))
            lines.append("registry_deletions{state=\"overdue\"} \(overdue)")
            lines += [
                "# HELP registry_oldest_undelivered_deletion_seconds Age of the oldest deletion not yet acknowledged by every service.",
                "# TYPE registry_oldest_undelivered_deletion_seconds gauge",
                "registry_oldest_undelivered_deletion_seconds \(try counts.decode("oldest", as: Double.self) ?? 0)",
            ]
        }
        lines += [
            "# HELP registry_delivery_attempts_total Deletion delivery attempts per linked service.",
            "# TYPE registry_delivery_attempts_total counter",
            "# HELP registry_delivery_failures_total Failed deletion delivery attempts per linked service.",
            "# TYPE registry_delivery_failures_total counter",
        ]
        for row in try await pool.query("SELECT * FROM delivery_counters ORDER BY project_id, service") {
            let labels =
                "project=\"\(try row.require("project_id", as: String.self))\",service=\"\(try row.require("service", as: String.self))\""
            lines.append("registry_delivery_attempts_total{\(labels)} \(try row.require("attempts", as: Int.self))")
            lines.append("registry_delivery_failures_total{\(labels)} \(try row.require("failures", as: Int.self))")
        }
        lines += [
            "# HELP registry_job_last_run_timestamp_seconds When each job last ran.",
            "# TYPE registry_job_last_run_timestamp_seconds gauge",
            "# HELP registry_job_duration_seconds How long each job's last run took.",
            "# TYPE registry_job_duration_seconds gauge",
        ]
        for row in try await pool.query("SELECT * FROM job_runs ORDER BY job") {
            let job: String = try row.require("job")
            let last: Date = try row.require("last_run_at")
            lines.append("registry_job_last_run_timestamp_seconds{job=\"\(job)\"} \(Int64(last.timeIntervalSince1970))")
            lines.append(
                "registry_job_duration_seconds{job=\"\(job)\"} \(try row.require("duration_ms", as: Double.self) / 1000)"
            )
        }
        return lines
    }
}
