import Foundation
import Postgres
import Registry

/// ``TargetingStore`` on PostgreSQL: ``TargetFilter`` as SQL (active, refreshed after the expiry cut-off,
/// messaging consent granted), keyset-paged by FID.
///
/// A topic page is read in windows: the next `limit` subscribers from the topic's index, then the live registrations
/// among them, bounded above and below on every joined table. PostgreSQL carries equalities across a join but not
/// inequalities, and with a lower bound only the planner misjudged every later page: a merge join read the whole
/// project before the page (a 1,000,000-subscriber topic took 28.8 s), and with the bound on every table it turned to
/// a hash join over every row after the page once about a fifth of the project was left (108–418 ms a page). Within
/// a window it estimates well, yet still joins by the wrong method; so the window's density, the project's
/// registrations in its FID range, picks the method (migration 15; docs/benchmarks.md).
struct PostgresTargetingStore: TargetingStore {
    let db: Database

    /// A window is dense when the topic holds at least a third of the registrations in its FID range: reading the
    /// three ranges side by side then costs less than looking each subscriber up.
    static let denseSpan = 3

    func members(topic: String, filter: TargetFilter) async throws -> [LiveRegistration] {
        var found: [LiveRegistration] = []
        var after = filter.after ?? ""
        // A window that yields fewer live registrations than the page needs is followed by the next one.
        while found.count < filter.limit {
            guard
                let window = try await db.query(
                    """
                    WITH w AS (SELECT max(ts.fid) AS upper, count(*) AS n FROM (SELECT ts.fid FROM topic_subscriptions ts
                        WHERE ts.project_id = \(filter.projectID) AND ts.topic = \(topic) AND ts.fid > \(after)
                        ORDER BY ts.fid LIMIT \(filter.limit)) AS ts)
                    SELECT w.upper, w.n, (SELECT count(*) FROM (SELECT 1 FROM registrations r
                        WHERE r.project_id = \(filter.projectID) AND r.fid > \(after) AND r.fid <= w.upper
                        LIMIT \(Self.denseSpan * filter.limit + 1)) AS s) AS span FROM w
                    """
                ).first, let upper = try window.decode("upper", as: String.self)
            else { break }
            let n = try window.require("n", as: Int.self)
            let dense = try window.require("span", as: Int.self) <= Self.denseSpan * n
            let (project, messaging, active) =
                (filter.projectID, ConsentService.messaging, RegistrationState.active.rawValue)
            let remaining = filter.limit - found.count
            found += try await db.query(
                dense
                    ? """
                    SELECT * FROM registry_topic_window_merged(\(project), \(topic), \(after), \(upper), \(messaging),
                        \(active), \(filter.expiredBefore)::timestamptz, \(remaining))
                    """
                    : """
                    SELECT * FROM registry_topic_window_probed(\(project), \(topic), \(after), \(upper), \(messaging),
                        \(active), \(filter.expiredBefore)::timestamptz, \(remaining))
                    """
            ).map(Self.decode)
            guard n == filter.limit else { break }
            after = upper
        }
        return found
    }

    func resolve(condition: Condition, filter: TargetFilter) async throws -> [LiveRegistration] {
        var binds: [String?] = [
            filter.projectID, filter.expiredBefore.postgresText, filter.after ?? "", String(filter.limit),
            ConsentService.messaging, RegistrationState.active.rawValue,
        ]
        let predicate = Self.sql(condition, binds: &binds)
        let query = PostgresQuery(
            unsafeSQL: """
                SELECT r.fid, r.token, r.platform, r.refreshed_at FROM registrations r
                JOIN consents c ON c.project_id = r.project_id AND c.fid = r.fid AND c.purpose = $5 AND c.granted
                WHERE r.project_id = $1 AND r.state = $6 AND r.refreshed_at > $2::timestamptz AND r.fid > $3
                  AND c.fid > $3
                  AND (\(predicate))
                ORDER BY r.fid LIMIT $4::int
                """, binds: binds)
        return try await db.query(query).map(Self.decode)
    }

    /// The condition as SQL over `r`; topic names are bound, never spliced.
    static func sql(_ condition: Condition, binds: inout [String?]) -> String {
        switch condition {
        case let .topic(name):
            binds.append(name)
            return
                "EXISTS (SELECT 1 FROM topic_subscriptions ts WHERE ts.project_id = r.project_id AND ts.fid = r.fid AND ts.topic = $\(binds.count))"
        case let .not(inner): return "NOT (\(sql(inner, binds: &binds)))"
        case let .and(a, b): return "(\(sql(a, binds: &binds))) AND (\(sql(b, binds: &binds)))"
        case let .or(a, b): return "(\(sql(a, binds: &binds))) OR (\(sql(b, binds: &binds)))"
        }
    }

    static func decode(_ row: PostgresRow) throws -> LiveRegistration {
        LiveRegistration(
            fid: try row.require("fid"), token: try row.require("token"),
            platform: try row.require("platform", as: Platform.self), refreshedAt: try row.require("refreshed_at"))
    }
}
