import Foundation
import Postgres
import Registry

/// ``TargetingStore`` on PostgreSQL: ``TargetFilter`` as SQL (active, refreshed after the expiry cut-off,
/// messaging consent granted), keyset-paged by FID.
///
/// The page's lower bound is stated on every joined table, not only the one it is ordered by: PostgreSQL carries
/// equalities across a join but not inequalities, so with the bound on one side only a merge join read every row of
/// the project before the page on the other sides, and streaming a topic page by page was quadratic (a 1,000,000-
/// subscriber topic took 28.8 s; docs/benchmarks.md).
struct PostgresTargetingStore: TargetingStore {
    let db: Database

    /// How a page joins its three keyset index scans, set for its transaction only (`set_config(…, true)`).
    ///
    /// The redundant lower bounds make the planner guess that few rows join, so left to itself it picks by the
    /// cursor: on a dense topic a merge join early on, but near its end a parallel hash join that reads every remaining
    /// row (200 ms a page of 10,000; 1.2 s for a generic plan), and after five executions a generic plan with a nested
    /// loop over consents (30–40 ms). So the store chooses, by the page's density (``densityProbe``):
    /// - `merged`: merge joins only. 11–16 ms for a page of 10,000 of a dense topic wherever it starts; on a sparse
    ///   topic it would read every registration between two subscribers (586–782 ms a page of a 1 % topic).
    /// - `lookedUp`: nested loops over the primary keys, a cost per subscriber, whatever lies between them.
    enum PagePlan: String {
        case merged, lookedUp

        /// Hash joins and parallel workers always off; of merge joins and nested loops, the plan's own.
        var settings: PostgresQuery {
            let (merge, loop) = self == .merged ? ("on", "off") : ("off", "on")
            return """
                SELECT set_config('enable_hashjoin', 'off', true), set_config('max_parallel_workers_per_gather', '0', true),
                    set_config('enable_mergejoin', \(merge), true), set_config('enable_nestloop', \(loop), true)
                """
        }
    }

    /// How many registrations lie between the cursor and the `sample`th subscriber after it, counted up to
    /// ``denseSpan`` times the sample (two index-only scans of at most that many entries). Fewer than that: the topic
    /// is dense enough here for a merge. The sample is the page's first ``probeSample`` subscribers, not the whole
    /// page: FIDs are random, so the density of the first thousand is the page's, and the probe reads a tenth as much
    /// (it was 3 ms of a dense page's 27 ms, 20 ms of a tenth-density page's 90 ms). Measured: a merge costs about
    /// 0.6 µs per registration it passes, a look-up about 21–25 µs per subscriber, so they break even near 35
    /// registrations per subscriber (docs/benchmarks.md). The line is drawn at 16, which keeps the probe of a sparse
    /// page short (it reads up to 16 entries per subscriber of the sample).
    static let denseSpan = 16
    static let probeSample = 1000

    static func densityProbe(projectID: String, topic: String, after: String, sample: Int) -> PostgresQuery {
        """
        SELECT count(*) AS span FROM (
            SELECT 1 FROM registrations r WHERE r.project_id = \(projectID) AND r.fid > \(after)
              AND r.fid <= (SELECT max(fid) FROM (
                  SELECT fid FROM topic_subscriptions WHERE project_id = \(projectID) AND topic = \(topic)
                    AND fid > \(after) ORDER BY fid LIMIT \(sample)) page)
            LIMIT \(denseSpan * sample)) x
        """
    }

    func members(topic: String, filter: TargetFilter) async throws -> [LiveRegistration] {
        let after = filter.after ?? ""
        // One prepared statement per plan (the comment tells them apart): a cached plan is never reused under the
        // other plan's settings.
        func page(_ plan: PagePlan) -> PostgresQuery {
            """
            SELECT /* \(unsafeSQL: plan.rawValue) */ r.fid, r.token, r.platform, r.refreshed_at,
                r.quarantined_at IS NOT NULL AS quarantined
            FROM topic_subscriptions ts
            JOIN registrations r ON r.project_id = ts.project_id AND r.fid = ts.fid
            JOIN consents c ON c.project_id = r.project_id AND c.fid = r.fid AND \(unsafeSQL: Self.messagingGranted)
            WHERE ts.project_id = \(filter.projectID) AND ts.topic = \(topic) AND ts.fid > \(after)
              AND r.fid > \(after) AND c.fid > \(after)
              AND r.state = \(RegistrationState.active.rawValue) AND r.refreshed_at > \(filter.expiredBefore)
            ORDER BY ts.fid LIMIT \(filter.limit)
            """
        }
        return try await db.transaction { connection in
            let plan = try await Self.plan(topic: topic, filter: filter, on: connection)
            let outcomes = try await connection.pipeline([plan.settings, page(plan)])
            _ = try outcomes[0].get()
            return try outcomes[1].get().map(Self.decode)
        }
    }

    /// How to join a page read from `topic`'s subscribers, by their density after the cursor (``densityProbe``).
    static func plan(topic: String, filter: TargetFilter, on connection: PostgresConnection) async throws -> PagePlan {
        let sample = min(filter.limit, probeSample)
        let span: Int =
            try await connection.query(
                densityProbe(projectID: filter.projectID, topic: topic, after: filter.after ?? "", sample: sample)
            ).first?.require("span") ?? 0
        return span < denseSpan * sample ? .merged : .lookedUp
    }

    func resolve(condition: Condition, filter: TargetFilter) async throws -> [LiveRegistration] {
        // One topic reaches who the topic's own page reaches: the same rows, driven by the topic's index.
        if case let .topic(name) = condition { return try await members(topic: name, filter: filter) }
        var binds: [String?] = [
            filter.projectID, filter.expiredBefore.postgresText, filter.after ?? "", String(filter.limit),
            RegistrationState.active.rawValue,
        ]
        // The topics every target must have (top-level conjuncts) are joined, each by its index in FID order; the
        // rest of the condition is a predicate. The page is then read from the first such topic's subscribers, not
        // from the project's registrations: its cost is the topics', not the project's. With the topics as EXISTS
        // subqueries, `'a' in topics && 'b' in topics` with nobody in both read every registration to say so (1.3 s
        // at 1,000,000 installations); joined, the two topic indexes are merged first (26-31 ms).
        let (topics, rest) = condition.requiredTopics
        let predicate = rest.map { Self.sql($0, binds: &binds) } ?? "true"
        let source: String
        let order: String
        if let first = topics.first {
            binds.append(first)
            let firstIndex = binds.count
            var joins = ""
            for (n, topic) in topics.dropFirst().enumerated() {
                binds.append(topic)
                joins += """

                    JOIN topic_subscriptions t\(n) ON t\(n).project_id = ts.project_id AND t\(n).fid = ts.fid
                        AND t\(n).topic = $\(binds.count) AND t\(n).fid > $3
                    """
            }
            source = """
                FROM topic_subscriptions ts\(joins)
                JOIN registrations r ON r.project_id = ts.project_id AND r.fid = ts.fid
                JOIN consents c ON c.project_id = r.project_id AND c.fid = r.fid AND \(Self.messagingGranted)
                WHERE ts.project_id = $1 AND ts.topic = $\(firstIndex) AND ts.fid > $3
                """
            order = "ts.fid"
        } else {
            source = """
                FROM registrations r
                JOIN consents c ON c.project_id = r.project_id AND c.fid = r.fid AND \(Self.messagingGranted)
                WHERE r.project_id = $1
                """
            order = "r.fid"
        }
        var query = PostgresQuery(
            unsafeSQL: """
                SELECT r.fid, r.token, r.platform, r.refreshed_at, r.quarantined_at IS NOT NULL AS quarantined
                \(source)
                  AND r.project_id = $1 AND r.state = $5 AND r.refreshed_at > $2::timestamptz AND r.fid > $3
                  AND c.fid > $3
                  AND (\(predicate))
                ORDER BY \(order) LIMIT $4::int
                """, binds: binds)
        // The SQL's shape is the client's condition: planned each time, never kept in the connection's cache.
        query.isPrepared = false
        // As a topic's pages: no hash join or parallel plan, which read every remaining row of the project on the
        // pages where the planner guessed few rows join (1.2 s a page of 10,000, against 100 ms merged). Of merge
        // joins and nested loops, the planner's choice: the statement is planned with its values each time.
        return try await db.transaction { connection in
            let outcomes = try await connection.pipeline([Self.boundedJoins, query])
            _ = try outcomes[0].get()
            return try outcomes[1].get().map(Self.decode)
        }
    }

    static let boundedJoins: PostgresQuery =
        "SELECT set_config('enable_hashjoin', 'off', true), set_config('max_parallel_workers_per_gather', '0', true)"

    /// The consent a target needs, with its purpose and flag as constants: so the planner can use the partial index
    /// `consents_messaging_granted` (m025), which a bound parameter could not prove it may.
    static let messagingGranted = "c.purpose = '\(ConsentService.messaging)' AND c.granted"

    /// The condition as SQL over `r`; topic names are bound, never spliced. Each subquery repeats the page's lower
    /// bound (`$3`, the cursor) on its own table, as every keyset join here does: without it a topic's EXISTS merged
    /// with the topic's whole index before the cursor on every page, and a stream was quadratic (a 1,000,000-member
    /// topic's condition took 30 s).
    static func sql(_ condition: Condition, binds: inout [String?]) -> String {
        switch condition {
        case let .topic(name):
            binds.append(name)
            return
                "EXISTS (SELECT 1 FROM topic_subscriptions ts WHERE ts.project_id = r.project_id AND ts.fid = r.fid AND ts.fid > $3 AND ts.topic = $\(binds.count))"
        case let .users(ids):
            binds.append(TextArray(ids).postgresText)
            return
                "EXISTS (SELECT 1 FROM user_bindings ub WHERE ub.project_id = r.project_id AND ub.fid = r.fid AND ub.fid > $3 AND ub.user_id = ANY($\(binds.count)::text[]))"
        case let .not(inner): return "NOT (\(sql(inner, binds: &binds)))"
        case let .and(a, b): return "(\(sql(a, binds: &binds))) AND (\(sql(b, binds: &binds)))"
        case let .or(a, b): return "(\(sql(a, binds: &binds))) OR (\(sql(b, binds: &binds)))"
        }
    }

    static func decode(_ row: PostgresRow) throws -> LiveRegistration {
        LiveRegistration(
            fid: try row.require("fid"), token: try row.require("token"),
            platform: try row.require("platform", as: Platform.self), refreshedAt: try row.require("refreshed_at"),
            quarantined: try row.require("quarantined"))
    }
}
