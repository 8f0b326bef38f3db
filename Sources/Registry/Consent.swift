import Foundation
import Postgres

/// Who recorded a consent decision.
public enum ConsentActor: String, Sendable {
    /// The installation itself, with its auth token.
    case installation
    /// The app's backend, with a server key.
    case server
    /// The app's default at installation time.
    case `default`
}

/// The current decision for one purpose.
public struct ConsentState: Sendable, Equatable {
    public let purpose: String
    public let granted: Bool
    public let policyVersion: String?
    public let source: String?
    public let actor: String
    public let updatedAt: Date
}

/// One entry of the append-only ledger.
public struct ConsentEvent: Sendable, Equatable {
    public let sequence: Int64
    public let purpose: String
    public let granted: Bool
    public let previous: Bool?
    public let actor: String
    public let source: String?
    public let policyVersion: String?
    public let recordedAt: Date
}

/// A consent decision to record.
public struct ConsentChange: Sendable {
    public var purpose: String
    public var granted: Bool
    public var policyVersion: String?
    public var source: String?
    public var actor: ConsentActor

    public init(
        purpose: String = ConsentService.messaging, granted: Bool, policyVersion: String? = nil, source: String? = nil,
        actor: ConsentActor
    ) {
        self.purpose = purpose
        self.granted = granted
        self.policyVersion = policyVersion
        self.source = source
        self.actor = actor
    }
}

/// Storage of consent state and its ledger.
public protocol ConsentStore: Sendable {
    /// Records the change and appends it to the ledger in one transaction; returns the new state and the
    /// previous value (nil when the purpose had none). Nil when the installation does not exist.
    func record(projectID: String, fid: String, change: ConsentChange, at: Date) async throws -> (ConsentState, Bool?)?
    func current(projectID: String, fid: String) async throws -> [ConsentState]
    func history(projectID: String, fid: String, limit: Int) async throws -> [ConsentEvent]
}

/// The consent rules: every decision is kept, with who, when, how and under which policy.
public struct ConsentService: Sendable {
    /// The purpose that gates push registrations (`autoInitEnabled`).
    public static let messaging = "messaging"

    public let store: any ConsentStore
    public let clock: any Clock

    public init(store: any ConsentStore, clock: any Clock) {
        self.store = store
        self.clock = clock
    }

    /// Purposes are short lower-case names: `messaging`, `analytics`, `marketing-email` …
    public static func isValidPurpose(_ purpose: String) -> Bool {
        let bytes = Array(purpose.utf8)
        guard (1...64).contains(bytes.count), let first = bytes.first, (97...122).contains(first) else { return false }
        return bytes.allSatisfy {
            (97...122).contains($0) || (48...57).contains($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
        }
    }

    public func record(installation: Installation, change: ConsentChange) async throws -> (
        state: ConsentState, previous: Bool?
    ) {
        guard
            let result = try await store.record(
                projectID: installation.projectID, fid: installation.fid, change: change,
                at: clock.now())
        else { throw RegistryError(.notFound, "installation \(installation.fid) not found") }
        return result
    }

    public func current(installation: Installation) async throws -> [ConsentState] {
        try await store.current(projectID: installation.projectID, fid: installation.fid)
    }

    public func history(installation: Installation, limit: Int = 1000) async throws -> [ConsentEvent] {
        try await store.history(projectID: installation.projectID, fid: installation.fid, limit: limit)
    }

    /// Whether messaging consent is on for the installation.
    public func messagingEnabled(installation: Installation) async throws -> Bool {
        try await current(installation: installation).first { $0.purpose == ConsentService.messaging }?.granted ?? false
    }
}

/// ``ConsentStore`` on PostgreSQL.
public struct PostgresConsentStore: ConsentStore {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    public func record(projectID: String, fid: String, change: ConsentChange, at: Date) async throws -> (
        ConsentState, Bool?
    )? {
        try await pool.withTransaction { c in
            // Lock the installation row so concurrent decisions for one installation are ordered.
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
            try await c.query(
                """
                INSERT INTO event_outbox (project_id, type, fid, data) VALUES (\(projectID), 'consent.changed', \(fid),
                    \("{\"purpose\":\"\(change.purpose)\",\"autoInitEnabled\":\(change.granted)}"))
                """)
            if change.purpose == ConsentService.messaging && !change.granted {
                // Withdrawal disables the installation's registrations at once; only a new registration revives them.
                let disabled = try await c.query(
                    """
                    UPDATE registrations SET state = 'disabled' WHERE project_id = \(projectID) AND fid = \(fid) AND state = 'active'
                    """)
                if disabled.affectedRows > 0 {
                    try await c.query(
                        "INSERT INTO event_outbox (project_id, type, fid) VALUES (\(projectID), 'registration.disabled', \(fid))"
                    )
                }
            }
            let state = ConsentState(
                purpose: change.purpose, granted: change.granted, policyVersion: change.policyVersion,
                source: change.source, actor: change.actor.rawValue, updatedAt: at)
            return (state, previous)
        }
    }

    public func current(projectID: String, fid: String) async throws -> [ConsentState] {
        try await pool.query("SELECT * FROM consents WHERE project_id = \(projectID) AND fid = \(fid) ORDER BY purpose")
            .map { row in
                ConsentState(
                    purpose: try row.require("purpose"), granted: try row.require("granted"),
                    policyVersion: try row.decode("policy_version"), source: try row.decode("source"),
                    actor: try row.require("actor"), updatedAt: try row.require("updated_at"))
            }
    }

    public func history(projectID: String, fid: String, limit: Int) async throws -> [ConsentEvent] {
        try await pool.query(
            """
            SELECT * FROM consent_events WHERE project_id = \(projectID) AND fid = \(fid) ORDER BY seq LIMIT \(limit)
            """
        ).map { row in
            ConsentEvent(
                sequence: try row.require("seq"), purpose: try row.require("purpose"),
                granted: try row.require("granted"),
                previous: try row.decode("previous"), actor: try row.require("actor"), source: try row.decode("source"),
                policyVersion: try row.decode("policy_version"), recordedAt: try row.require("recorded_at"))
        }
    }
}
