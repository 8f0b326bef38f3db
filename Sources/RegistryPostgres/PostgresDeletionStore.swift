import Foundation
import Postgres
import Registry

/// ``DeletionStore`` on PostgreSQL: linked services, deletion records (live and purged), acknowledgements.
struct PostgresDeletionStore: DeletionStore {
    let db: Database

    // MARK: - Linked services

    static func context(projectID: String, name: String) -> String { "linked_services:\(projectID)/\(name)" }

    func addLinkedService(projectID: String, service: LinkedService, secret: String, limit: Int) async throws -> Bool {
        let sealed = try db.seal(secret, context: Self.context(projectID: projectID, name: service.name))
        do {
            return try await db.transaction { c in
                // Counted under the project's row lock (NO KEY UPDATE: the foreign-key checks of other writes of the
                // project, which take KEY SHARE, do not wait), so two concurrent adds cannot both pass the limit.
                try await c.query("SELECT 1 FROM projects WHERE project_id = \(projectID) FOR NO KEY UPDATE")
                let taken = try await c.query(
                    "SELECT 1 FROM linked_services WHERE project_id = \(projectID) AND name = \(service.name)")
                guard taken.isEmpty else { return false }
                try await c.requireRoom(
                    "SELECT count(*)::int AS n FROM linked_services WHERE project_id = \(projectID)", limit: limit,
                    field: "name", "a project may have at most \(limit) linked services")
                try await c.query(
                    """
                    INSERT INTO linked_services (project_id, name, endpoint, secret, secret_holder, created_at)
                    VALUES (\(projectID), \(service.name), \(service.endpoint), \(sealed), \(SecretHolder.project.rawValue),
                        \(service.createdAt))
                    """)
                return true
            }
        } catch let error as RegistryError where error.kind == .alreadyExists {
            return false
        }
    }

    func linkedServices(projectID: String) async throws -> [LinkedService] {
        try await db.query(
            "SELECT name, endpoint, created_at FROM linked_services WHERE project_id = \(projectID) ORDER BY name"
        ).map {
            LinkedService(
                name: try $0.require("name"), endpoint: try $0.require("endpoint"),
                createdAt: try $0.require("created_at"))
        }
    }

    func removeLinkedService(projectID: String, name: String, at: Date) async throws -> Bool {
        try await db.transaction { c in
            let removed = try await c.query(
                "DELETE FROM linked_services WHERE project_id = \(projectID) AND name = \(name)")
            guard removed.affectedRows == 1 else { return false }
            // Its counters (two /metrics series) go with it: names a project adds and removes never pile up.
            try await c.query("DELETE FROM delivery_counters WHERE project_id = \(projectID) AND service = \(name)")
            // The deletions it still owes, locked in id order before their deliveries change (``lockDeletion``):
            // an acknowledgement by another service of one of them is waited for, and seen by the statement below.
            try await c.query(
                """
                SELECT 1 FROM deletions WHERE id IN (
                    SELECT deletion_id FROM deletion_deliveries WHERE project_id = \(projectID) AND service = \(name)
                      AND state IN (\(DeliveryState.pending.rawValue), \(DeliveryState.accepted.rawValue)))
                ORDER BY id FOR NO KEY UPDATE
                """)
            // Its open deliveries are abandoned and the deletions left with none open complete, in one statement
            // each (the service's row is held until this commits, and the project's deletions wait for it).
            try await c.query(
                """
                WITH abandoned AS (
                    UPDATE deletion_deliveries d SET state = \(DeliveryState.abandoned.rawValue)
                    FROM deletions del
                    WHERE d.deletion_id = del.id AND del.project_id = \(projectID) AND d.service = \(name)
                      AND d.state IN (\(DeliveryState.pending.rawValue), \(DeliveryState.accepted.rawValue))
                    RETURNING d.deletion_id
                )
                UPDATE deletions SET completed_at = \(at)
                WHERE id IN (SELECT deletion_id FROM abandoned) AND completed_at IS NULL
                  AND NOT EXISTS (SELECT 1 FROM deletion_deliveries o WHERE o.deletion_id = deletions.id
                      AND o.service <> \(name)
                      AND o.state IN (\(DeliveryState.pending.rawValue), \(DeliveryState.accepted.rawValue)))
                """)
            return true
        }
    }

    /// Takes the row lock on deletion `id` that every writer of its deliveries' outcomes takes first, in a statement
    /// of its own: two services' acknowledgements of one deletion, or an acknowledgement and a removal, then run one
    /// after the other, and the later one's ``completeIfDone`` sees the earlier one's outcome. Without it each checked
    /// "no delivery left open" in a snapshot where the other's was still open, neither completed the deletion, and
    /// nothing ever did (write skew under READ COMMITTED).
    static func lockDeletion(_ id: Int64, on c: PostgresConnection) async throws {
        try await c.query("SELECT 1 FROM deletions WHERE id = \(id) FOR NO KEY UPDATE")
    }

    /// Completes a deletion once no delivery of it is open (each acknowledged or abandoned). The caller holds the
    /// deletion's lock (``lockDeletion(_:on:)``) since before it changed a delivery's state.
    static func completeIfDone(_ id: Int64, at: Date, on c: PostgresConnection) async throws {
        try await c.query(
            """
            UPDATE deletions SET completed_at = \(at) WHERE id = \(id) AND completed_at IS NULL
            AND NOT EXISTS (SELECT 1 FROM deletion_deliveries WHERE deletion_id = \(id)
                AND state IN (\(DeliveryState.pending.rawValue), \(DeliveryState.accepted.rawValue)))
            """)
    }

    func linkedServiceSecrets(projectID: String, name: String, at: Date) async throws -> LinkedServiceKeys? {
        guard
            let row = try await db.query(
                """
                SELECT secret, secret_holder, CASE WHEN previous_secret_until > \(at) THEN previous_secret END AS previous,
                    previous_secret_holder, rekeyed_by_project_at
                FROM linked_services WHERE project_id = \(projectID) AND name = \(name)
                """
            ).first
        else { return nil }
        let context = Self.context(projectID: projectID, name: name)
        var secrets = [
            LinkedServiceSecret(
                try db.open(try row.require("secret"), context: context),
                holder: try row.require("secret_holder", as: SecretHolder.self))
        ]
        if let previous: String = try row.decode("previous") {
            secrets.append(
                LinkedServiceSecret(
                    try db.open(previous, context: context),
                    holder: try row.decode("previous_secret_holder", as: SecretHolder.self) ?? .project))
        }
        return LinkedServiceKeys(secrets: secrets, rekeyedByProjectAt: try row.decode("rekeyed_by_project_at"))
    }

    func rotateSecret(
        projectID: String, name: String, secret: String, holder: SecretHolder, previousUntil: Date, at: Date
    ) async throws -> Bool {
        let sealed = try db.seal(secret, context: Self.context(projectID: projectID, name: name))
        let rekeyedAt: Date? = holder == .project ? at : nil
        return try await db.query(
            """
            UPDATE linked_services SET previous_secret = secret, previous_secret_holder = secret_holder,
                previous_secret_until = \(previousUntil), secret = \(sealed), secret_holder = \(holder.rawValue),
                rekeyed_by_project_at = coalesce(\(rekeyedAt), rekeyed_by_project_at)
            WHERE project_id = \(projectID) AND name = \(name)
            """
        ).affectedRows == 1
    }

    // MARK: - Records

    func deletion(projectID: String, fid: String, fidHash: [UInt8]) async throws -> DeletionRecord? {
        if let row = try await db.query("SELECT * FROM deletions WHERE project_id = \(projectID) AND fid = \(fid)")
            .first
        {
            return try await live(row)
        }
        // Purged at its deadline with services unacknowledged: known only by the keyed hash.
        return try await db.query(
            "SELECT * FROM overdue_deletions WHERE project_id = \(projectID) AND fid_hmac = \(ByteA(fidHash))"
        ).first.map(Self.purged)
    }

    func deletions(projectID: String, state: ReceiptState, at now: Date, afterID: Int64, limit: Int) async throws
        -> [DeletionRecord]
    {
        // The receipt states of DeletionRecord.state(at:), as SQL.
        let condition: String
        switch state {
        case .done: condition = "completed_at IS NOT NULL"
        case .pending: condition = "completed_at IS NULL AND deadline > $2::timestamptz"
        case .overdue: condition = "completed_at IS NULL AND deadline <= $2::timestamptz"
        }
        let rows = try await db.query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT * FROM deletions WHERE project_id = $1 AND \(condition) AND $2::timestamptz IS NOT NULL
                    AND id > $3::bigint ORDER BY id LIMIT $4::int
                    """, binds: [projectID, now.postgresText, String(afterID), String(limit)]))
        var records: [DeletionRecord] = []
        for row in rows { records.append(try await live(row)) }
        guard state == .overdue else { return records }
        let purged = try await db.query(
            """
            SELECT * FROM overdue_deletions WHERE project_id = \(projectID) AND deletion_id > \(afterID)
            ORDER BY deletion_id LIMIT \(limit)
            """
        ).map(Self.purged)
        return Array((records + purged).sorted { $0.id < $1.id }.prefix(limit))
    }

    func live(_ row: PostgresRow) async throws -> DeletionRecord {
        try await Self.live(row, query: db.query)
    }

    /// A live record with its deliveries, read through `query` (the pool's, or a transaction's connection's).
    static func live(_ row: PostgresRow, query: (PostgresQuery) async throws -> PostgresRows) async throws
        -> DeletionRecord
    {
        let id: Int64 = try row.require("id")
        // An acknowledged delivery carries the re-key it was acknowledged after; an open one the service's latest.
        let deliveries = try await query(
            """
            SELECT d.*, CASE WHEN d.acknowledged_at IS NULL THEN ls.rekeyed_by_project_at
                ELSE d.rekeyed_by_project_at END AS rekeyed
            FROM deletion_deliveries d
            LEFT JOIN linked_services ls ON ls.project_id = d.project_id AND ls.name = d.service
            WHERE d.deletion_id = \(id) ORDER BY d.service
            """
        ).map {
            DeliveryStatus(
                service: try $0.require("service"), state: try $0.require("state", as: DeliveryState.self),
                attempts: try $0.require("attempts"), lastError: try $0.decode("last_error"),
                acknowledgedAt: try $0.decode("acknowledged_at"), rekeyedByProjectAt: try $0.decode("rekeyed"))
        }
        return DeletionRecord(
            id: id, fid: try row.require("fid"), fidHash: try row.require("fid_hmac", as: ByteA.self).bytes,
            reason: try row.require("reason", as: DeletionReason.self), requestedAt: try row.require("requested_at"),
            deadline: try row.require("deadline"), completedAt: try row.decode("completed_at"), purged: false,
            services: deliveries)
    }

    static func purged(_ row: PostgresRow) throws -> DeletionRecord {
        let services = (try row.require("services", as: String.self)).trimmingCharacters(
            in: CharacterSet(charactersIn: "{}")
        ).split(separator: ",").map {
            DeliveryStatus(
                service: String($0), state: .unacknowledged, attempts: 0, lastError: nil, acknowledgedAt: nil)
        }
        return DeletionRecord(
            id: try row.require("deletion_id"), fid: nil, fidHash: try row.require("fid_hmac", as: ByteA.self).bytes,
            reason: try row.require("reason", as: DeletionReason.self), requestedAt: try row.require("requested_at"),
            deadline: try row.require("deadline"), completedAt: nil, purged: true, services: services)
    }

    // MARK: - Acknowledgements

    func acknowledge(projectID: String, fid: String, service: String, deliveryID: String, at: Date) async throws
        -> AcknowledgeOutcome
    {
        try await db.transaction { c in
            // The deletion's lock first (``lockDeletion``), then its delivery, in statements of their own.
            guard
                let id = try await c.query(
                    "SELECT id FROM deletions WHERE project_id = \(projectID) AND fid = \(fid) FOR NO KEY UPDATE"
                ).first?.require("id", as: Int64.self),
                let row = try await c.query(
                    """
                    SELECT state FROM deletion_deliveries
                    WHERE deletion_id = \(id) AND service = \(service) AND delivery_id = \(deliveryID)
                    FOR UPDATE
                    """
                ).first
            else { return .notFound }
            switch try row.require("state", as: DeliveryState.self) {
            case .pending, .accepted: break
            case .acknowledged: return .alreadyAcknowledged
            case let state: return .closed(state)
            }
            try await c.query(
                """
                UPDATE deletion_deliveries d SET state = \(DeliveryState.acknowledged.rawValue), acknowledged_at = \(at),
                    rekeyed_by_project_at = (SELECT rekeyed_by_project_at FROM linked_services
                        WHERE project_id = \(projectID) AND name = \(service))
                WHERE d.deletion_id = \(id) AND d.service = \(service)
                """)
            try await Self.completeIfDone(id, at: at, on: c)
            return .acknowledged
        }
    }
}
