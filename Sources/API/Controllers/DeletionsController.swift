import Foundation
import HTTP
import JSON
import Registry

/// Linked services, deletion receipts, asynchronous acknowledgements and the change feed (server key).
struct DeletionsController: Sendable {
    let deletions: DeletionService
    let feed: ChangeFeed

    func register(_ routes: inout Routes) {
        routes.add(
            .POST, "/v1/projects/{project}/linkedServices", .serverKey,
            audit: .resource("linkedServices.create", "linkedServices"), createService)
        routes.add(.GET, "/v1/projects/{project}/linkedServices", .serverKey, listServices)
        routes.add(.GET, "/v1/projects/{project}/linkedServices/{name}", .serverKey, getService)
        routes.add(
            .DELETE, "/v1/projects/{project}/linkedServices/{name}", .serverKey,
            audit: .resource("linkedServices.delete", "linkedServices/{name}"), deleteService)
        // Signed by the service itself, or asked with a server key (the project replaces a lost secret).
        routes.add(
            .POST, "/v1/projects/{project}/linkedServices/{name}:rotateSecret",
            .either(
                .registrySignature { context, project in
                    .rotation(project: project.id, service: context.parameter("name"))
                }, when: { $0.hasSignature }, otherwise: .serverKey),
            audit: .resource("linkedServices.rotateSecret", "linkedServices/{name}"), rotateSecret)
        routes.add(.GET, "/v1/projects/{project}/deletions", .serverKey, listDeletions)
        routes.add(.GET, "/v1/projects/{project}/deletions/{fid}", .serverKey, getDeletion)
        // Signed for the very delivery it confirms: `{"deliveryId": "<the notice's deliveryId>"}`.
        routes.add(
            .POST, "/v1/projects/{project}/deletions/{fid}/acks/{name}",
            .registrySignature { context, project in
                let body = FieldReader(try context.jsonObject())
                return .acknowledgement(
                    project: project.id, fid: context.parameter("fid"), service: context.parameter("name"),
                    deliveryID: try body.text("deliveryId", required: true, maxBytes: 256)!)
            }, acknowledge)
        routes.add(.GET, "/v1/projects/{project}/events", .serverKey, events)
    }

    static func json(_ service: LinkedService) -> JSONValue {
        [
            "name": .string(service.name), "endpoint": .string(service.endpoint),
            "createTime": .string(Timestamp.rfc3339(service.createdAt)),
        ]
    }

    func createService(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let body = FieldReader(try context.jsonObject())
        let name = try body.string("name", required: true, maxBytes: 63)!
        let endpoint = try body.text("endpoint", required: true, maxBytes: 2048)!
        let (service, secret) = try await deletions.addLinkedService(
            projectID: project.id, name: name, endpoint: endpoint)
        guard case var .object(members) = DeletionsController.json(service) else { return .json([:]) }
        members.append(("secret", .string(secret)))
        return .json(.object(members))
    }

    func listServices(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        return .json([
            "linkedServices": .array(
                try await deletions.linkedServices(projectID: project.id).map(DeletionsController.json))
        ])
    }

    func getService(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        guard
            let service = try await deletions.linkedServices(projectID: project.id).first(where: {
                $0.name == context.parameter("name")
            })
        else {
            throw APIError.notFound("linked service \(context.parameter("name").prefix(64)) not found")
        }
        return .json(DeletionsController.json(service))
    }

    func deleteService(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        guard try await deletions.removeLinkedService(projectID: project.id, name: context.parameter("name")) else {
            throw APIError.notFound("linked service \(context.parameter("name").prefix(64)) not found")
        }
        return .json([:])
    }

    static func json(_ receipt: DeletionReceipt) -> JSONValue {
        [
            "id": .string(String(receipt.id)), "fid": receipt.fid.map { .string($0) } ?? .null,
            "fidHash": .string(receipt.fidHash),
            "reason": .string(receipt.reason.rawValue), "requestTime": .string(Timestamp.rfc3339(receipt.requestedAt)),
            "deadline": .string(Timestamp.rfc3339(receipt.deadline)), "state": .string(receipt.state.rawValue),
            "services": .array(receipt.services.map(Self.json)),
        ]
    }

    /// One service's part of a receipt.
    static func json(_ s: DeliveryStatus) -> JSONValue {
        [
            "name": .string(s.service), "state": .string(s.state.rawValue), "attempts": .int(s.attempts),
            "lastError": s.lastError.map { .string($0) } ?? .null,
            "ackTime": s.acknowledgedAt.map { .string(Timestamp.rfc3339($0)) } ?? .null,
            "rekeyedByProjectTime": s.rekeyedByProjectAt.map { .string(Timestamp.rfc3339($0)) } ?? .null,
        ]
    }

    func getDeletion(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        guard let receipt = try await deletions.receipt(projectID: project.id, fid: context.parameter("fid")) else {
            throw APIError.notFound("no deletion of \(context.parameter("fid").prefix(64)) is on record")
        }
        return .json(DeletionsController.json(receipt))
    }

    func listDeletions(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        guard let state = ReceiptState(rawValue: context.request.query("state") ?? ReceiptState.pending.rawValue) else {
            throw APIError.invalid("state: must be pending, overdue or done")
        }
        let size = try Paging.pageSize(context, default: 100, max: 1000)
        let after =
            try Paging.decode(context.request.query("pageToken")).map { key -> Int64 in
                guard let id = Int64(key) else { return -1 }
                return id
            } ?? 0
        guard after >= 0 else { throw APIError.invalid("pageToken: not a page token from this service") }
        let page = try await deletions.receipts(projectID: project.id, state: state, afterID: after, limit: size + 1)
        var members: [(String, JSONValue)] = [("deletions", .array(page.prefix(size).map(DeletionsController.json)))]
        if page.count > size, let last = page.prefix(size).last {
            members.append(("nextPageToken", .string(Paging.encode(String(last.id)))))
        }
        return .json(.object(members))
    }

    /// The linked service's own confirmation of one delivery, signed for that delivery
    /// (``WebhookSignature/Purpose/acknowledgement``) with a secret the service asked for itself. A server key does
    /// not count.
    func acknowledge(_ context: RequestContext, _ caller: ServiceCaller) async throws -> HTTPResponse {
        try await deletions.acknowledge(caller.signed)
        return .json([:])
    }

    /// `POST …/linkedServices/{name}:rotateSecret`: a new secret, shown once; the old one works for a day more.
    ///
    /// Signed by the service (`Registry-Signature` for ``WebhookSignature/Purpose/rotation``, with its current secret),
    /// the new secret is the service's alone and signs acknowledgements. Asked with a server key (the project replaces
    /// a lost secret), the project knows it: acknowledgements need the service's own rotation again, and the service's
    /// receipt entries say when the project re-keyed it.
    func rotateSecret(_ context: RequestContext, _ caller: OneOf<ServiceCaller, ServerCaller>) async throws
        -> HTTPResponse
    {
        let name = context.parameter("name")
        let project: Project
        let rotated: (secret: String, previousUntil: Date)?
        switch caller {
        case let .first(service):
            project = service.project
            rotated = try await deletions.rotateSecret(service.signed)
        case let .second(server):
            project = server.project
            rotated = try await deletions.rotateSecret(projectID: project.id, name: name)
        }
        guard let (secret, until) = rotated,
            let service = try await deletions.linkedServices(projectID: project.id).first(where: { $0.name == name })
        else { throw APIError.notFound("linked service \(name.prefix(64)) not found") }
        guard case var .object(members) = DeletionsController.json(service) else { return .json([:]) }
        members += [("secret", .string(secret)), ("previousSecretValidUntil", .string(Timestamp.rfc3339(until)))]
        return .json(.object(members))
    }

    /// `GET /v1/projects/{project}/events?after=<cursor>&waitSeconds=<0..30>`: long-polls until events arrive.
    func events(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        var cursor: Int64 = 0
        if let text = context.request.query("after"), !text.isEmpty {
            guard let value = Int64(text), value >= 0 else {
                throw APIError.invalid("after: must be a cursor from this feed")
            }
            cursor = value
        }
        var wait = 0
        if let text = context.request.query("waitSeconds") {
            guard let value = Int(text), (0...30).contains(value) else {
                throw APIError.invalid("waitSeconds: must be 0 to 30")
            }
            wait = value
        }
        let page = try await feed.events(projectID: project.id, after: cursor, limit: 1000, waitSeconds: wait)
        let items: [JSONValue] = page.map { e in
            var members: [(String, JSONValue)] = [
                ("cursor", .string(String(e.sequence))), ("type", .string(e.type.rawValue)), ("fid", .string(e.fid)),
                ("time", .string(Timestamp.rfc3339(e.time))),
            ]
            if let data = e.data { members.append(("data", data)) }
            return .object(members)
        }
        return .json(["events": .array(items), "nextCursor": .string(String(page.last?.sequence ?? cursor))])
    }
}
