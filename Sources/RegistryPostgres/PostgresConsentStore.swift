import Foundation
import Postgres
import Registry

/// ``ConsentStore`` on PostgreSQL.
struct PostgresConsentStore: ConsentStore {
    let db: Database

    func record(projectID: String, fid: String, change: ConsentChange, at: Date) async throws -> (
        ConsentState, Bool?
    )? {
        try await db.transaction { c in
            // Lock the installation row so concurrent decisions (and registrations) for one installation are ordered.
            let exists = try await c.query(
                "SELECT 1 FROM installations WHERE project_id = \(projectID) AND fid = \(fid) FOR UPDATE")
            guard !exists.isEmpty else { return nil }
            let previous = try await c.query(
                "SELECT granted FROM consents WHERE project_id = \(projectID) AND fid = \(fid) AND purpose = \(change.purpose)"
            ).first.map { try $0.require("granted", as: Bool.self) }
            try await c.query(
                """
                INSERT INTO consents (project_id, fid, purpose, granted, policy_version, source, actor, updated_at)
                VALUES (\(projectID), \(fid), \(change.purpose), \(change.granted), \(change.policyVersion), \(change.source),
                        \(change.actor.rawValue), \(at))
                ON CONFLICT (project_id, fid, purpose) DO UPDATE SET granted = excluded.granted,
                    policy_version = excluded.policy_version, source = excluded.source, actor = excluded.actor,
                    updated_at = excluded.updated_at
                """)
            try await c.query(
                """
                INSERT INTO consent_events (project_id, fid, purpose, granted, previous, actor, source, policy_version, recorded_at)
                VALUES (\(projectID), \(fid), \(change.purpose), \(change.granted), \(previous), \(change.actor.rawValue),
                        \(change.source), \(change.policyVersion), \(at))
                """)
            try await Outbox.append(
                .consentChanged, projectID: projectID, fid: fid,
                payload: ["purpose": .string(change.purpose), "autoInitEnabled": .bool(change.granted)], on: c)
            if change.purpose == ConsentService.messaging && !change.granted {
                // Withdrawal disables the installation's registrations at once; only a new registration revives them.
                let disabled = try await c.query(
                    """
                    UPDATE registrations SET state = \(RegistrationState.disabled.rawValue)
                    WHERE project_id = \(projectID) AND fid = \(fid) AND state = \(RegistrationState.active.rawValue)
                    """)
                if disabled.affectedRows > 0 {
                    try await Outbox.append(.registrationDisabled, projectID: projectID, fid: fid, on: c)
                }
            }
            let state = ConsentState(
                purpose: change.purpose, granted: change.granted, policyVersion: change.policyVersion,
                source: change.source, actor: change.actor, updatedAt: at)
            return (state, previous)
        }
    }

    func current(projectID: String, fid: String) async throws -> [ConsentState] {
        try await db.query("SELECT * FROM consents WHERE project_id = \(projectID) AND fid = \(fid) ORDER BY purpose")
            .map { row in
                ConsentState(
                    purpose: try row.require("purpose"), granted: try row.require("granted"),
                    policyVersion: try row.decode("policy_version"), source: try row.decode("source"),
                    actor: try row.require("actor", as: ConsentActor.self), updatedAt: try row.require("updated_at"))
            }
    }

    func history(projectID: String, fid: String, limit: Int) async throws -> [ConsentEvent] {
        try await db.query(
            """
            SELECT * FROM consent_events WHERE project_id = \(projectID) AND fid = \(fid) ORDER BY seq LIMIT \(limit)
            """
        ).map { row in
            ConsentEvent(
                sequence: try row.require("seq"), purpose: try row.require("purpose"),
                granted: try row.require("granted"), previous: try row.decode("previous"),
                actor: try row.require("actor", as: ConsentActor.self), source: try row.decode("source"),
                policyVersion: try row.decode("policy_version"), recordedAt: try row.require("recorded_at"))
        }
    }
}
