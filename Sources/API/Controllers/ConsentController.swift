import Foundation
import HTTP
import JSON
import Registry

/// The consent ledger: `PUT`/`GET /v1/projects/{project}/installations/{fid}/consent`, by the installation
/// itself (its auth token) or by the app's backend (server key).
struct ConsentController {
    let installations: InstallationService
    let consent: ConsentService
    /// Statements recorded per installation (`RATE_LIMIT_CONSENT_PER_HOUR`): the ledger keeps every one for the
    /// installation's life, so a client repeating its statement in a loop would grow it without end.
    let perInstallation: RateLimiter

    /// The installation itself (its auth token, for its own `{fid}`) or the app's backend (a bearer credential).
    static let principal: Principal<OneOf<ServerCaller, InstallationCaller>> = .either(
        .serverKey, when: { $0.hasBearer }, otherwise: .installationToken(owning: "fid"))

    func register(_ routes: inout Routes) {
        routes.add(
            .PUT, "/v1/projects/{project}/installations/{fid}/consent", Self.principal, browser: true,
            audit: .installation("consent.write"), put)
        routes.add(.GET, "/v1/projects/{project}/installations/{fid}/consent", Self.principal, browser: true, get)
    }

    /// The installation the request acts on, and who is acting.
    private func subject(_ context: RequestContext, _ caller: OneOf<ServerCaller, InstallationCaller>) async throws
        -> (Installation, ConsentActor)
    {
        switch caller {
        case let .first(server):
            let fid = context.parameter("fid")
            guard let installation = try await installations.find(project: server.project, fid: fid) else {
                throw APIError.notFound("installation \(fid.prefix(64)) not found")
            }
            return (installation, .server)
        case let .second(client):
            return (client.installation, .installation)
        }
    }

    func put(_ context: RequestContext, _ caller: OneOf<ServerCaller, InstallationCaller>) async throws
        -> HTTPResponse
    {
        let (installation, actor) = try await subject(context, caller)
        let body = FieldReader(try context.jsonObject())
        let granted = try body.bool("autoInitEnabled", required: true)!
        let purpose = try body.string("purpose", maxBytes: 64) ?? ConsentService.messaging
        guard ConsentService.isValidPurpose(purpose) else {
            throw APIError.invalid("purpose: 1-64 lower-case letters, digits, '-' or '_', starting with a letter")
        }
        let change = ConsentChange(
            purpose: purpose, granted: granted, policyVersion: try body.text("policyVersion", maxBytes: 128),
            source: try body.text("source", maxBytes: 128), actor: actor)
        if let wait = perInstallation.acquire(installation.projectID + "/" + installation.fid) {
            throw APIError.exhausted(
                "too many consent statements for installation \(installation.fid); retry after \(wait) s",
                retryAfter: wait)
        }
        let (state, previous) = try await consent.record(installation: installation, change: change)
        var json = ConsentController.json(state)
        if case var .object(members) = json {
            members.append(("previous", previous.map { .bool($0) } ?? .null))
            json = .object([("fid", .string(installation.fid))] + members)
        }
        return .json(json)
    }

    func get(_ context: RequestContext, _ caller: OneOf<ServerCaller, InstallationCaller>) async throws
        -> HTTPResponse
    {
        let (installation, _) = try await subject(context, caller)
        switch context.request.query("view") {
        case nil, "current":
            let states = try await consent.current(installation: installation)
            return .json(["fid": .string(installation.fid), "consents": .array(states.map(ConsentController.json))])
        case "history":
            // Keyset-paged by the ledger's sequence: a ledger grows with every statement, without a bound.
            let size = try Paging.pageSize(context, default: 1000, max: 1000)
            var after: Int64 = 0
            if let token = try Paging.decode(context.request.query("pageToken", "page_token")) {
                guard let sequence = Int64(token), sequence >= 0 else {
                    throw APIError.invalid("pageToken: not a page token of this ledger")
                }
                after = sequence
            }
            let events = try await consent.history(installation: installation, after: after, limit: size + 1)
            var members: [(String, JSONValue)] = [
                ("fid", .string(installation.fid)),
                ("history", .array(events.prefix(size).map(ConsentController.json))),
            ]
            if events.count > size, let last = events.prefix(size).last {
                members.append(("nextPageToken", .string(Paging.encode(String(last.sequence)))))
            }
            return .json(.object(members))
        case let other?:
            throw APIError.invalid("view: must be current or history, not \(other.prefix(32))")
        }
    }

    static func json(_ state: ConsentState) -> JSONValue {
        [
            "purpose": .string(state.purpose), "autoInitEnabled": .bool(state.granted),
            "policyVersion": state.policyVersion.map { .string($0) } ?? .null,
            "source": state.source.map { .string($0) } ?? .null,
            "actor": .string(state.actor.rawValue), "updateTime": .string(Timestamp.rfc3339(state.updatedAt)),
        ]
    }

    static func json(_ event: ConsentEvent) -> JSONValue {
        [
            "sequence": .int(event.sequence), "purpose": .string(event.purpose),
            "autoInitEnabled": .bool(event.granted),
            "previous": event.previous.map { .bool($0) } ?? .null, "actor": .string(event.actor.rawValue),
            "source": event.source.map { .string($0) } ?? .null,
            "policyVersion": event.policyVersion.map { .string($0) } ?? .null,
            "time": .string(Timestamp.rfc3339(event.recordedAt)),
        ]
    }
}
