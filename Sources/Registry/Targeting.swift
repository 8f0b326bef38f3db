import Foundation
import Postgres

/// A registration a message may be sent to.
public struct Target: Sendable, Equatable {
    public let fid: String
    public let token: String
    public let platform: Platform
    public let refreshedAt: Date
    public let stale: Bool
}

/// Whether a token may be sent to, and if not, why.
public enum Sendability: String, Sendable {
    case ok = "OK"
    case stale = "STALE"
    case noConsent = "NO_CONSENT"
    case expired = "EXPIRED"
    case disabled = "DISABLED"
    case deleted = "DELETED"
    case unknownToken = "UNKNOWN_TOKEN"

    public var sendable: Bool { self == .ok || self == .stale }
}

/// Who a topic or condition reaches: live registrations only (active, not expired, messaging consent on),
/// keyset-paged by FID.
public struct TargetingService: Sendable {
    let pool: PostgresPool
    public let clock: any Clock
    public let freshness: Freshness

    public init(pool: PostgresPool, clock: any Clock, freshness: Freshness) {
        self.pool = pool
        self.clock = clock
        self.freshness = freshness
    }

    /// Live registrations subscribed to `topic`, after FID `after`.
    public func members(projectID: String, topic: String, after: String?, limit: Int) async throws -> [Target] {
        let now = clock.now()
        let expiredBefore = now.addingTimeInterval(-freshness.expireAfter)
        let rows = try await pool.query(
            """
            SELECT r.fid, r.token, r.platform, r.refreshed_at FROM topic_subscriptions ts
            JOIN registrations r ON r.project_id = ts.project_id AND r.fid = ts.fid
            JOIN consents c ON c.project_id = r.project_id AND c.fid = r.fid AND c.purpose = 'messaging' AND c.granted
            WHERE ts.project_id = \(projectID) AND ts.topic = \(topic) AND ts.fid > \(after ?? "")
              AND r.state = 'active' AND r.refreshed_at > \(expiredBefore)
            ORDER BY ts.fid LIMIT \(limit)
            """)
        return try rows.map { try target($0, now: now) }
    }

    /// Live registrations that satisfy `condition`, after FID `after`.
    public func resolve(projectID: String, condition: Condition, after: String?, limit: Int) async throws -> [Target] {
        let now = clock.now()
        var binds: [String?] = [
            projectID, (now.addingTimeInterval(-freshness.expireAfter)).postgresText, after ?? "", String(limit),
        ]
        let predicate = sql(condition, binds: &binds)
        let query = PostgresQuery(
            unsafeSQL: """
                SELECT r.fid, r.token, r.platform, r.refreshed_at FROM registrations r
                JOIN consents c ON c.project_id = r.project_id AND c.fid = r.fid AND c.purpose = 'messaging' AND c.granted
                WHERE r.project_id = $1 AND r.state = 'active' AND r.refreshed_at > $2::timestamptz AND r.fid > $3
                  AND (\(predicate))
                ORDER BY r.fid LIMIT $4::int
                """, binds: binds)
        return try await pool.query(query).map { try target($0, now: now) }
    }

    /// The condition as SQL over `r`; topic names are bound, never spliced.
    func sql(_ condition: Condition, binds: inout [String?]) -> String {
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

    private func target(_ row: PostgresRow, now: Date) throws -> Target {
        let refreshed: Date = try row.require("refreshed_at")
        return Target(
            fid: try row.require("fid"), token: try row.require("token"),
            platform: Platform(rawValue: try row.require("platform")) ?? .web, refreshedAt: refreshed,
            stale: now.timeIntervalSince(refreshed) > freshness.staleAfter)
    }

    /// Whether `registration` may be sent to now.
    public func sendability(of registration: Registration, messagingConsent: Bool) -> Sendability {
        let age = clock.now().timeIntervalSince(registration.refreshedAt)
        if registration.state == "disabled" { return .disabled }
        if !messagingConsent { return .noConsent }
        if age > freshness.expireAfter { return .expired }
        if age > freshness.staleAfter { return .stale }
        return .ok
    }
}
