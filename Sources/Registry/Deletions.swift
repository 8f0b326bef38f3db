import Crypto
import Foundation
import JSON
import Postgres

/// A service that holds installation data and must hear of every deletion.
public struct LinkedService: Sendable, Equatable {
    public let name: String
    public let endpoint: String
    public let createdAt: Date
}

/// What a linked service's endpoint answered.
public enum DeliveryResponse: Sendable, Equatable {
    case status(Int)
    case failed(String)
}

/// Sends a signed deletion notice; the registry does not know HTTP, so the API layer provides this.
public protocol DeliveryTransport: Sendable {
    func post(endpoint: String, body: [UInt8], headers: [(String, String)]) async -> DeliveryResponse
}

/// One service's part of a deletion receipt.
public struct DeliveryStatus: Sendable, Equatable {
    public let service: String
    public let state: String
    public let attempts: Int
    public let lastError: String?
    public let acknowledgedAt: Date?
}

/// The proof of a deletion: what was asked, by when, and which services confirmed.
public struct DeletionReceipt: Sendable, Equatable {
    public let id: Int64
    public let fid: String?
    public let fidHash: String
    public let reason: String
    public let requestedAt: Date
    public let deadline: Date
    public let state: String
    public let services: [DeliveryStatus]
}

/// Timing of the deletion machinery; every value is configurable.
public struct DeletionPolicy: Sendable {
    /// Back-off between delivery attempts: `base` doubling to `max`, with ±20 % jitter.
    public var backoffBase: TimeInterval = 1
    public var backoffMax: TimeInterval = 3600
    /// How long a claimed delivery stays with its worker before another may retry it.
    public var lease: TimeInterval = 60
    /// How long a completed deletion's record stays for audit (never past its deadline).
    public var auditPeriod: TimeInterval = 30 * 86_400
    /// Idle installations are deleted after this.
    public var expireAfter: TimeInterval = 270 * 86_400
    /// Change-feed events are kept this long.
    public var eventRetention: TimeInterval = 7 * 86_400
    /// When set, linked-service endpoints must use one of these hosts.
    public var allowedHosts: Set<String>?

    public init() {}

    /// The delay before attempt `attempts + 1`.
    public func backoff(afterAttempts attempts: Int) -> TimeInterval {
        let exponent = Double(max(0, min(attempts - 1, 40)))
        let delay = min(backoffMax, backoffBase * pow(2, exponent))
        return delay * Double.random(in: 0.8...1.2)
    }
}

/// Linked services, deletion receipts, acknowledgements.
public struct DeletionService: Sendable {
    let pool: PostgresPool
    public let clock: any Clock
    public let policy: DeletionPolicy
    let fidKey: [UInt8]

    public init(pool: PostgresPool, clock: any Clock, policy: DeletionPolicy, fidKey: [UInt8]) {
        self.pool = pool
        self.clock = clock
        self.policy = policy
        self.fidKey = fidKey
    }

    public func fidHash(projectID: String, fid: String) -> [UInt8] {
        HMACSHA256.authenticate(Array((projectID + "\u{0}" + fid).utf8), key: fidKey)
    }

    // MARK: - Linked services

    public static func isValidServiceName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...63).contains(bytes.count), let first = bytes.first, (97...122).contains(first) else { return false }
        return bytes.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == UInt8(ascii: "-") }
    }

    /// Registers a service; returns it and its signing secret (shown once).
    public func addLinkedService(projectID: String, name: String, endpoint: String) async throws -> (
        LinkedService, String
    ) {
        guard DeletionService.isValidServiceName(name) else {
            throw RegistryError.invalid("name", "1-63 lower-case letters, digits and hyphens, starting with a letter")
        }
        guard endpoint.utf8.count <= 2048, let url = URL(string: endpoint), let scheme = url.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = url.host, !host.isEmpty
        else { throw RegistryError.invalid("endpoint", "must be an absolute http(s) URL") }
        if let allowed = policy.allowedHosts, !allowed.contains(host.lowercased()) {
            throw RegistryError.invalid("endpoint", "host \(host) is not in LINKED_SERVICE_HOSTS")
        }
        let secret = "whsec_" + Base64URL.encode(try SecureRandom.bytes(32))
        let now = clock.now()
        do {
            try await pool.query(
                """
                INSERT INTO linked_services (project_id, name, endpoint, secret, created_at)
                VALUES (\(projectID), \(name), \(endpoint), \(secret), \(now))
                """)
        } catch let error as PostgresError where error.sqlState == PostgresError.uniqueViolation {
            throw RegistryError(.alreadyExists, "linked service \(name) already exists")
        }
        return (LinkedService(name: name, endpoint: endpoint, createdAt: now), secret)
    }

    public func linkedServices(projectID: String) async throws -> [LinkedService] {
        try await pool.query(
            "SELECT name, endpoint, created_at FROM linked_services WHERE project_id = \(projectID) ORDER BY name"
        ).map {
            LinkedService(
                name: try $0.require("name"), endpoint: try $0.require("endpoint"),
                createdAt: try $0.require("created_at"))
        }
    }

    /// Removes a service; its pending deliveries are dropped (it no longer holds data to delete).
    public func removeLinkedService(projectID: String, name: String) async throws -> Bool {
        try await pool.withTransaction { c in
            let removed = try await c.query(
                "DELETE FROM linked_services WHERE project_id = \(projectID) AND name = \(name)")
            guard removed.affectedRows == 1 else { return false }
            let affected = try await c.query(
                """
                DELETE FROM deletion_deliveries d USING deletions del
                WHERE d.deletion_id = del.id AND del.project_id = \(projectID) AND d.service = \(name) AND d.state <> 'acknowledged'
                RETURNING d.deletion_id
                """)
            for row in affected {
                try await DeletionService.completeIfDone(try row.require("deletion_id"), at: clock.now(), on: c)
            }
            return true
        }
    }

    // MARK: - Receipts

    public func receipt(projectID: String, fid: String) async throws -> DeletionReceipt? {
        if let row = try await pool.query("SELECT * FROM deletions WHERE project_id = \(projectID) AND fid = \(fid)")
            .first
        {
            return try await receipt(row)
        }
        // Purged at its deadline with services unacknowledged: known only by the keyed hash.
        let hash = ByteA(fidHash(projectID: projectID, fid: fid))
        guard
            let row = try await pool.query(
                "SELECT * FROM overdue_deletions WHERE project_id = \(projectID) AND fid_hmac = \(hash)"
            ).first
        else { return nil }
        return try overdueReceipt(row)
    }

    private func receipt(_ row: PostgresRow) async throws -> DeletionReceipt {
        let id: Int64 = try row.require("id")
        let deliveries = try await pool.query(
            "SELECT * FROM deletion_deliveries WHERE deletion_id = \(id) ORDER BY service"
        ).map {
            DeliveryStatus(
                service: try $0.require("service"), state: try $0.require("state"),
                attempts: try $0.require("attempts"),
                lastError: try $0.decode("last_error"), acknowledgedAt: try $0.decode("acknowledged_at"))
        }
        let deadline: Date = try row.require("deadline")
        let completed: Date? = try row.decode("completed_at")
        let state = completed != nil ? "done" : clock.now() >= deadline ? "overdue" : "pending"
        return DeletionReceipt(
            id: id, fid: try row.require("fid"), fidHash: Hex.encode(try row.require("fid_hmac", as: ByteA.self).bytes),
            reason: try row.require("reason"), requestedAt: try row.require("requested_at"), deadline: deadline,
            state: state, services: deliveries)
    }

    private func overdueReceipt(_ row: PostgresRow) throws -> DeletionReceipt {
        let services = (try row.require("services", as: String.self)).trimmingCharacters(
            in: CharacterSet(charactersIn: "{}")
        )
        .split(separator: ",").map {
            DeliveryStatus(
                service: String($0), state: "unacknowledged", attempts: 0, lastError: nil, acknowledgedAt: nil)
        }
        return DeletionReceipt(
            id: try row.require("deletion_id"), fid: nil,
            fidHash: Hex.encode(try row.require("fid_hmac", as: ByteA.self).bytes), reason: try row.require("reason"),
            requestedAt: try row.require("requested_at"), deadline: try row.require("deadline"), state: "overdue",
            services: services)
    }

    /// Receipts by state, in id order after `afterID`.
    public func receipts(projectID: String, state: String, afterID: Int64, limit: Int) async throws -> [DeletionReceipt]
    {
        let now = clock.now()
        switch state {
        case "done":
            return try await collect(
                try await pool.query(
                    """
                    SELECT * FROM deletions WHERE project_id = \(projectID) AND completed_at IS NOT NULL AND id > \(afterID)
                    ORDER BY id LIMIT \(limit)
                    """))
        case "pending":
            return try await collect(
                try await pool.query(
                    """
                    SELECT * FROM deletions WHERE project_id = \(projectID) AND completed_at IS NULL AND deadline > \(now) AND id > \(afterID)
                    ORDER BY id LIMIT \(limit)
                    """))
        default:
            let live = try await collect(
                try await pool.query(
                    """
                    SELECT * FROM deletions WHERE project_id = \(projectID) AND completed_at IS NULL AND deadline <= \(now) AND id > \(afterID)
                    ORDER BY id LIMIT \(limit)
                    """))
            let purged = try await pool.query(
                """
                SELECT * FROM overdue_deletions WHERE project_id = \(projectID) AND deletion_id > \(afterID) ORDER BY deletion_id LIMIT \(limit)
                """
            ).map(overdueReceipt)
            return Array((live + purged).sorted { $0.id < $1.id }.prefix(limit))
        }
    }

    private func collect(_ rows: PostgresRows) async throws -> [DeletionReceipt] {
        var out: [DeletionReceipt] = []
        for row in rows { out.append(try await receipt(row)) }
        return out
    }

    /// A service confirms, after answering 202, that it deleted the installation's data.
    public func acknowledge(projectID: String, fid: String, service: String) async throws -> Bool {
        try await pool.withTransaction { c in
            let now = clock.now()
            let rows = try await c.query(
                """
                UPDATE deletion_deliveries d SET state = 'acknowledged', acknowledged_at = \(now)
                FROM deletions del WHERE d.deletion_id = del.id AND del.project_id = \(projectID) AND del.fid = \(fid)
                AND d.service = \(service) RETURNING d.deletion_id
                """)
            guard let id = try rows.first?.require("deletion_id", as: Int64.self) else { return false }
            try await DeletionService.completeIfDone(id, at: now, on: c)
            return true
        }
    }

    static func completeIfDone(_ id: Int64, at: Date, on c: PostgresConnection) async throws {
        try await c.query(
            """
            UPDATE deletions SET completed_at = \(at) WHERE id = \(id) AND completed_at IS NULL
            AND NOT EXISTS (SELECT 1 FROM deletion_deliveries WHERE deletion_id = \(id) AND state <> 'acknowledged')
            """)
    }
}
