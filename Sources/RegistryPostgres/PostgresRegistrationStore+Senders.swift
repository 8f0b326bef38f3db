import Foundation
import Postgres
import Registry

/// The tokens of other senders and scopes (`sender_tokens`, migration 20).
extension PostgresRegistrationStore {
    func senderToken(
        projectID: String, fid: String, sender: String, scope: String, candidate: String, at: Date, limit: Int
    ) async throws -> SenderTokenWrite {
        try await db.transaction { c in
            // The installation's lock first, as for its own registration: a consent withdrawal or a deletion committed
            // meanwhile is seen by the statements after it, and the count of its tokens is one writer's at a time.
            guard
                try await c.query(
                    "SELECT 1 FROM installations WHERE project_id = \(projectID) AND fid = \(fid) FOR UPDATE"
                ).first != nil
            else { return .installationNotFound }
            let granted: Bool? = try await c.query(
                """
                SELECT granted FROM consents
                WHERE project_id = \(projectID) AND fid = \(fid) AND purpose = \(ConsentService.messaging)
                """
            ).first?.decode("granted")
            guard granted == true else { return .consentOff }
            if let existing: String = try await c.query(
                """
                UPDATE sender_tokens SET refreshed_at = greatest(refreshed_at, \(at))
                WHERE project_id = \(projectID) AND fid = \(fid) AND sender = \(sender) AND scope = \(scope)
                RETURNING token
                """
            ).first?.require("token") {
                return .token(existing)
            }
            let held: Int = try await c.query(
                "SELECT count(*)::int AS n FROM sender_tokens WHERE project_id = \(projectID) AND fid = \(fid)"
            ).first?.require("n") ?? 0
            guard held < limit else { return .full }
            try await c.query(
                """
                INSERT INTO sender_tokens (project_id, fid, sender, scope, token, created_at, refreshed_at)
                VALUES (\(projectID), \(fid), \(sender), \(scope), \(candidate), \(at), \(at))
                """)
            return .token(candidate)
        }
    }

    func deleteSenderTokens(projectID: String, fid: String, only: (sender: String, scope: String)?) async throws
        -> [String]
    {
        let rows = try await db.query(
            """
            DELETE FROM sender_tokens
            WHERE project_id = \(projectID) AND fid = \(fid)
              AND (\(only == nil) OR (sender = \(only?.sender) AND scope = \(only?.scope)))
            RETURNING token
            """)
        return try rows.map { try $0.require("token") }
    }
}
