import Foundation
import Postgres
import Registry

/// ``TopicStore`` on PostgreSQL.
struct PostgresTopicStore: TopicStore {
    let db: Database

    func add(projectID: String, fids: [String], topic: String, at: Date) async throws -> [String:
        SubscribeResult]
    {
        guard fids.count > 1 else {
            guard let fid = fids.first else { return [:] }
            return [fid: try await subscribe(projectID: projectID, fid: fid, topic: topic, at: at).0]
        }
        return try await db.transaction { c in
            // Lock the installations in a fixed order so concurrent batches cannot deadlock or pass the limit, and so
            // a consent change (which takes the same lock) is either seen by the next statement or waits for us.
            let locked = Set(
                try await c.query(
                    """
                    SELECT fid FROM installations WHERE project_id = \(projectID) AND fid = ANY(\(TextArray(fids))::text[])
                    ORDER BY fid COLLATE "C" FOR UPDATE
                    """
                ).map { try $0.require("fid", as: String.self) })
            var state: [String: (subscribed: Bool, count: Int, granted: Bool)] = [:]
            for row in try await c.query(
                """
                SELECT f AS fid,
                    EXISTS (SELECT 1 FROM topic_subscriptions ts WHERE ts.project_id = \(projectID) AND ts.fid = f
                        AND ts.topic = \(topic)) AS subscribed,
                    (SELECT count(*) FROM topic_subscriptions ts WHERE ts.project_id = \(projectID) AND ts.fid = f) AS n,
                    coalesce((SELECT granted FROM consents c WHERE c.project_id = \(projectID) AND c.fid = f
                        AND c.purpose = \(ConsentService.messaging)), false) AS granted
                FROM unnest(\(TextArray(Array(locked)))::text[]) AS f
                """)
            {
                state[try row.require("fid")] = (
                    try row.require("subscribed"), try row.require("n", as: Int.self), try row.require("granted")
                )
            }
            var results: [String: SubscribeResult] = [:]
            var toAdd: [String] = []
            for fid in fids where results[fid] == nil {
                let result = SubscribeResult.decide(
                    exists: state[fid] != nil, subscribed: state[fid]?.subscribed ?? false,
                    consented: state[fid]?.granted ?? false, count: state[fid]?.count ?? 0)
                results[fid] = result
                if result == .added { toAdd.append(fid) }
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

    /// One statement (`registry_subscribe`, migration 14), committed with concurrent writes of the same loop (group
    /// commit), in the installation's order: the installation's lock, then the same rule as a batch's.
    func subscribe(projectID: String, fid: String, topic: String, at: Date) async throws -> (SubscribeResult, Date?) {
        guard
            let row = try await db.groupCommitted(
                """
                SELECT outcome, since FROM registry_subscribe(\(projectID), \(fid), \(topic), \(at)::timestamptz,
                    \(ConsentService.messaging), \(Topic.maxPerInstallation))
                """, key: projectID + "/" + fid
            ).first
        else { throw RegistryError(.internal, "registry_subscribe returned no row") }
        return (try SubscribeOutcome(row).result, try row.decode("since", as: Date.self))
    }

    func remove(projectID: String, fids: [String], topic: String) async throws -> Set<String> {
        guard !fids.isEmpty else { return [] }
        return Set(
            try await db.query(
                """
                DELETE FROM topic_subscriptions WHERE project_id = \(projectID) AND topic = \(topic)
                AND fid = ANY(\(TextArray(fids))::text[]) RETURNING fid
                """
            ).map { try $0.require("fid", as: String.self) })
    }

    func created(projectID: String, fid: String, topic: String) async throws -> Date? {
        try await db.query(
            "SELECT created_at FROM topic_subscriptions WHERE project_id = \(projectID) AND fid = \(fid) AND topic = \(topic)"
        ).first?.require("created_at", as: Date.self)
    }

    func list(projectID: String, fid: String, after: String?, limit: Int) async throws -> [TopicSubscription] {
        try await db.query(
            """
            SELECT topic, created_at FROM topic_subscriptions WHERE project_id = \(projectID) AND fid = \(fid)
            AND topic > \(after ?? "") ORDER BY topic LIMIT \(limit)
            """
        ).map { TopicSubscription(topic: try $0.require("topic"), createdAt: try $0.require("created_at")) }
    }
}
