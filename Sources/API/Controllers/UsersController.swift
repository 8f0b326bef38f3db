import Crypto
import Foundation
import HTTP
import JSON
import Registry

/// People: an installation's user (bind, move, unbind, read), a user's installations, a person's erasure and its
/// receipt. The project's own routes (Firebase has none for this: it removed device groups).
struct UsersController {
    let users: UserService
    let erasures: ErasureService
    let installations: InstallationService
    let registrations: RegistrationService
    let consent: ConsentService
    let freshness: Freshness
    /// An erasure is one transaction over everything the person was ever bound to (its statements each up to the
    /// statement timeout): two at a time for a project on a replica, so one project's erasures cannot hold the pool.
    let erasing = StreamSlots(perProject: 2)

    func register(_ routes: inout Routes) {
        let binding = "/v1/projects/{project}/installations/{fid}/user"
        routes.add(.PUT, binding, .serverKey, audit: .installation("users.bind"), bind)
        routes.add(.DELETE, binding, .serverKey, audit: .installation("users.unbind"), unbind)
        // The installation may read its own binding, never set it.
        routes.add(
            .GET, binding, .either(.serverKey, when: { $0.hasBearer }, otherwise: .installationToken(owning: "fid")),
            read)
        routes.add(.GET, "/v1/projects/{project}/users/{userId}", .serverKey, user)
        routes.add(.POST, "/v1/projects/{project}/users/{userId}:erase", .serverKey, audit: .user("users.erase"), erase)
        routes.add(.GET, "/v1/projects/{project}/erasures/{erasureId}", .serverKey, receipt)
    }

    func bind(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let body = FieldReader(try context.jsonObject())
        let userID = try body.string("userId", required: true, maxBytes: UserService.maxUserIDBytes)!
        let result = try await users.bind(project: caller.project, fid: context.parameter("fid"), userID: userID)
        var members = Self.json(result.binding, project: caller.project).objectValue ?? []
        switch result.change {
        case .bound: members.append(("change", "BOUND"))
        case .unchanged: members.append(("change", "UNCHANGED"))
        case let .moved(from):
            members += [("change", "MOVED"), ("previousUserId", .string(from))]
        }
        members.append(("displaced", .array(result.displaced.map { .string($0) })))
        return .json(.object(members))
    }

    func unbind(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let previous = try await users.unbind(project: caller.project, fid: context.parameter("fid"))
        return .json(["previousUserId": previous.map { .string($0.userID) } ?? .null])
    }

    func read(_ context: RequestContext, _ caller: OneOf<ServerCaller, InstallationCaller>) async throws -> HTTPResponse
    {
        let project: Project
        switch caller {
        case let .first(server):
            project = server.project
            _ = try await users.requireInstallation(project: project, fid: context.parameter("fid"))
        case let .second(installation): project = installation.project
        }
        let fid = context.parameter("fid")
        guard let binding = try await users.binding(project: project, fid: fid) else {
            return .json(
                [
                    "name": .string("projects/\(project.id)/installations/\(fid)/user"), "fid": .string(fid),
                    "userId": .null, "bindTime": .null,
                ])
        }
        return .json(Self.json(binding, project: project))
    }

    static func json(_ binding: UserBinding, project: Project) -> JSONValue {
        [
            "name": .string("projects/\(project.id)/installations/\(binding.fid)/user"),
            "fid": .string(binding.fid), "userId": .string(binding.userID),
            "bindTime": .string(Timestamp.rfc3339(binding.boundAt)),
        ]
    }

    /// The user's installations with what decides whether a message reaches each: its registration, its consent and
    /// the registration's freshness.
    func user(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let userID = try UserService.validate(userID: context.parameter("userId"))
        let now = users.clock.now()
        var items: [JSONValue] = []
        for binding in try await users.bindings(project: project, userID: userID) {
            guard let installation = try await installations.find(project: project, fid: binding.fid) else { continue }
            let messaging = try await consent.messagingEnabled(installation: installation)
            var members: [(String, JSONValue)] = [
                ("fid", .string(binding.fid)), ("bindTime", .string(Timestamp.rfc3339(binding.boundAt))),
                ("lastSeenTime", .string(Timestamp.rfc3339(installation.lastSeenAt))),
                ("messagingConsent", .bool(messaging)),
            ]
            if let registration = try await registrations.find(project: project, tokenOrFID: binding.fid) {
                members.append(("registration", RegistrationsController.json(registration, project: project)))
                members.append(
                    (
                        "sendability",
                        .string(freshness.sendability(of: registration, messagingConsent: messaging, at: now).rawValue)
                    ))
            } else {
                members += [("registration", .null), ("sendability", .string(Sendability.unknownToken.rawValue))]
            }
            items.append(.object(members))
        }
        return .json(
            [
                "name": .string("projects/\(project.id)/users/\(userID)"), "userId": .string(userID),
                "installations": .array(items),
            ])
    }

    func erase(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let slot = try erasing.take(
            caller.project.id, or: "two erasures of the project are under way; retry", retryAfter: 1)
        defer { slot.release() }
        let receipt = try await erasures.erase(
            project: caller.project, userID: context.parameter("userId"), traceparent: context.trace.header)
        return .json(Self.json(receipt, project: caller.project))
    }

    func receipt(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        guard let receipt = try await erasures.receipt(project: caller.project, id: context.parameter("erasureId"))
        else {
            throw APIError.notFound("erasure \(context.parameter("erasureId").prefix(64)) not found")
        }
        return .json(Self.json(receipt, project: caller.project))
    }

    /// The person's receipt: each installation's deletion (its FID while the record keeps it, its keyed hash always)
    /// with each linked service's part, and what was bound to the same user ID afterwards.
    static func json(_ receipt: ErasureReceipt, project: Project) -> JSONValue {
        let record = receipt.record
        return [
            "name": .string("projects/\(project.id)/erasures/\(record.id)"), "erasureId": .string(record.id),
            "userHash": .string(Hex.encode(record.userHash)),
            "requestTime": .string(Timestamp.rfc3339(record.requestedAt)),
            "deadline": .string(Timestamp.rfc3339(record.deadline)), "state": .string(receipt.state.rawValue),
            "installations": .array(
                record.members.map { member in
                    [
                        "deletionId": .string(String(member.deletionID)),
                        "fid": member.deletion?.fid.map { .string($0) } ?? .null,
                        "fidHash": .string(Hex.encode(member.fidHash)),
                        "state": .string(member.state(at: receipt.at).rawValue),
                        "completeTime": (member.deletion?.completedAt ?? member.completedAt).map {
                            .string(Timestamp.rfc3339($0))
                        } ?? .null,
                        "services": .array(member.services.map(DeletionsController.json)),
                    ]
                }),
            "boundAfter": .array(
                receipt.boundAfter.map {
                    ["fid": .string($0.fid), "bindTime": .string(Timestamp.rfc3339($0.boundAt))]
                }),
        ]
    }
}
