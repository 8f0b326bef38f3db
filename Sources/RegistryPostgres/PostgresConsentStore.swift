import Foundation
import JSON
import Postgres
import Registry

/// ``ConsentStore`` on PostgreSQL.
struct PostgresConsentStore: ConsentStore {
    let db: Database

    func record(projectID: String, fid: String, change: ConsentChange, at: Date) async throws -> (
        ConsentState, Bool?
    )? {
        // One statement (`registry_consent_bounded`, migrations 12 and 29): the installation's lock, the previous
        // decision read after it, the bound on purposes, the decision, its ledger entry and feed event, and on a
        // withdrawal of messaging consent the registrations disabled. Committed with concurrent writes of the same
        // loop (group commit), in the installation's order.
        let payload: JSONValue = ["purpose": .string(change.purpose), "autoInitEnabled": .bool(change.granted)]
        guard
            let row = try await db.groupCommitted(
                """
                SELECT installed, prior, at_bound FROM registry_consent_bounded(\(projectID), \(fid), \(change.purpose),
                    \(change.granted), \(change.policyVersion), \(change.source), \(change.actor.rawValue),
                    \(at)::timestamptz, \(ConsentService.messaging), \(RegistrationState.active.rawValue),
                    \(RegistrationState.disabled.rawValue), \(EventType.consentChanged.rawValue), \(payload.text),
                    \(EventType.registrationDisabled.rawValue), \(ConsentService.maxPurposes)::int)
                """, key: projectID + "/" + fid
            ).first
        else { throw RegistryError(.internal, "registry_consent returned no row") }
        guard try row.require("installed", as: Bool.self) else { return nil }
        if try row.require("at_bound", as: Bool.self) { throw ConsentService.tooManyPurposes }
        let state = ConsentState(
            purpose: change.purpose, granted: change.granted, policyVersion: change.policyVersion,
            source: change.source, actor: change.actor, updatedAt: at)
        return (state, try row.decode("prior", as: Bool.self))
    }

    func current(projectID: String, fid: String) async throws -> [ConsentState] {
        try await db.query("SELECT * FROM consents WHERE project_id = \(projectID) AND fid = \(fid) ORDER BY purpose")
            .map(Self.decode)
    }

    func decision(projectID: String, fid: String, purpose: String) async throws -> ConsentState? {
        try await db.batchedRead(
            "SELECT * FROM consents WHERE project_id = \(projectID) AND fid = \(fid) AND purpose = \(purpose)"
        ).first.map(Self.decode)
    }

    static func decode(_ row: PostgresRow) throws -> ConsentState {
        ConsentState(
            purpose: try row.require("purpose"), granted: try row.require("granted"),
            policyVersion: try row.decode("policy_version"), source: try row.decode("source"),
            actor: try row.require("actor", as: ConsentActor.self), updatedAt: try row.require("updated_at"))
    }

    func history(projectID: String, fid: String, after sequence: Int64, limit: Int) async throws -> [ConsentEvent] {
        try await db.query(
            """
            SELECT * FROM consent_events WHERE project_id = \(projectID) AND fid = \(fid) AND seq > \(sequence)
            ORDER BY seq LIMIT \(limit)
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
