import Foundation
import Postgres

/// What adding a subscription did.
public enum SubscribeResult: Sendable, Equatable {
    case added
    case alreadyExists
    case tooManyTopics
}

/// Topic subscriptions, keyed by installation (so they survive a token refresh).
public protocol TopicStore: Sendable {
    /// Adds `topic` for each FID; the result per FID.
    func add(projectID: String, fids: [String], topic: String, at: Date) async throws -> [String: SubscribeResult]
    /// Removes `topic` from each FID; the FIDs that had it.
    func remove(projectID: String, fids: [String], topic: String) async throws -> Set<String>
    func created(projectID: String, fid: String, topic: String) async throws -> Date?
    /// Topics of an installation in name order, after `after`, at most `limit`.
    func list(projectID: String, fid: String, after: String?, limit: Int) async throws -> [(
        topic: String, created: Date
    )]
}

/// ``TopicStore`` on PostgreSQL.
public struct PostgresTopicStore: TopicStore {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    public func add(projectID: String, fids: [String], topic: String, at: Date) async throws -> [String:
        SubscribeResult]
    {
        guard !fids.isEmpty else { return [:] }
        return try await pool.withTransaction { c in
            // Lock the installations in a fixed order so concurrent batches cannot deadlock or pass the limit.
            try await c.query(
                """
                SELECT fid FROM installations WHERE project_id = \(projectID) AND fid = ANY(\(TextArray(fids))::text[])
                ORDER BY fid FOR UPDATE
                """)
            let existing = Set(
                try await c.query(
                    """
                    SELECT fid FROM topic_subscriptions WHERE project_id = \(projectID) AND topic = \(topic)
                    AND fid = ANY(\(TextArray(fids))::text[])
                    """
                ).map { try $0.require("fid", as: String.self) })
            var counts: [String: Int] = [:]
            for row in try await c.query(
                """
                SELECT fid, count(*) AS n FROM topic_subscriptions WHERE project_id = \(projectID)
                AND fid = ANY(\(TextArray(fids))::text[]) GROUP BY fid
                """)
            {
                counts[try row.require("fid")] = try row.require("n", as: Int.self)
            }
            var results: [String: SubscribeResult] = [:]
            var toAdd: [String] = []
            for fid in fids where results[fid] == nil {
                if existing.contains(fid) {
                    results[fid] = .alreadyExists
                } else if counts[fid, default: 0] >= Topic.maxPerInstallation {
                    results[fid] = .tooManyTopics
                } else {
                    results[fid] = .added
                    toAdd.append(fid)
                }
            }
            if !toAdd.isEmpty {
                try await c.query(
                    """
                    INSERT INTO topic_subscriptions (project_id, fid, topic, created_at)
                    SELECT \(projectID), f, \(topic), \(at) FROM unnest(\(TextArray(toAdd))::text[]) AS f
                    ON CONFLICT DO NOTHING
                    """)
            }
            return results
        }
    }

    public func remove(projectID: String, fids: [String], topic: String) async throws -> Set<String> {
        guard !fids.isEmpty else { return [] }
        return Set(
            try await pool.query(
                """
                DELETE FROM topic_subscriptions WHERE project_id = \(projectID) AND topic = \(topic)
                AND fid = ANY(\(TextArray(fids))::text[]) RETURNING fid
                """
            ).map { try $0.require("fid", as: String.self) })
    }

    public func created(projectID: String, fid: String, topic: String) async throws -> Date? {
        try await pool.query(
            "SELECT created_at FROM topic_subscriptions WHERE project_id = \(projectID) AND fid = \(fid) AND topic = \(topic)"
        ).first?.require("created_at", as: Date.self)
    }

    public func list(projectID: String, fid: String, after: String?, limit: Int) async throws -> [(
        topic: String, created: Date
    )] {
        try await pool.query(
            """
            SELECT topic, created_at FROM topic_subscriptions WHERE project_id = \(projectID) AND fid = \(fid)
            AND topic > \(after ?? "") ORDER BY topic LIMIT \(limit)
            """
        ).map { (try $0.require("topic"), try $0.require("created_at")) }
    }
}
