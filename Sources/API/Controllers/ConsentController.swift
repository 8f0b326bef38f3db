import Foundation
import HTTP
import JSON
import Registry

/// The consent ledger: `PUT`/`GET /v1/projects/{project}/installations/{fid}/consent`, by the installation
/// itself (its auth token) or by the app's backend (server key).
struct ConsentController {
    let auth: Authenticator
    let installations: InstallationService
    let consent: ConsentService

    func register(_ routes: inout Routes) {
        routes.add(.PUT, "/v1/projects/{project}/installations/{fid}/consent", browser: true, put)
        routes.add(.GET, "/v1/projects/{project}/installations/{fid}/consent", browser: true, get)
    }

    /// The installation the request may act on, and who is acting.
    private func subject(_ context: RequestContext) async throws -> (Installation, ConsentActor) {
        let project = try await auth.project(context)
        let fid = context.parameter("fid")
        if auth.hasServerKey(context) {
            try await auth.server(context, project: project)
            guard let installation = try await installations.find(project: project, fid: fid) else {
                throw APIError.notFound("installation \(fid.prefix(64)) not found")
            }
            return (installation, .server)
        }
        let installation = try await auth.installation(context, project: project)
        guard installation.fid == fid else {
            throw APIError.permissionDenied("the auth token belongs to another installation")
        }
        return (installation, .installation)
    }

    func put(_ context: RequestContext) async throws -> HTTPResponse {
        let (installation, actor) = try await subject(context)
        let body = FieldReader(try context.jsonObject())
        let granted = try body.bool("autoInitEnabled", required: true)!
        let purpose = try body.string("purpose", maxBytes: 64) ?? ConsentService.messaging
        guard ConsentService.isValidPurpose(purpose) else {
            throw APIError.invalid("purpose: 1-64 lower-case letters, digits, '-' or '_', starting with a letter")
        }
        let change = ConsentChange(
            purpose: purpose, granted: granted, policyVersion: try body.text("policyVersion", maxBytes: 128),
            source: try body.text("source", maxBytes: 128), actor: actor)
        let (state, previous) = try await consent.record(installation: installation, change: change)
        var json = ConsentController.json(state)
        if case var .object(members) = json {
            members.append(("previous", previous.map { .bool($0) } ?? .null))
            json = .object([("fid", .string(installation.fid))] + members)
        }
        return .json(json)
    }

    func get(_ context: RequestContext) async throws -> HTTPResponse {
        let (installation, _) = try await subject(context)
        switch context.request.query("view") {
        case nil, "current":
            let states = try await consent.current(installation: installation)
            return .json(["fid": .string(installation.fid), "consents": .array(states.map(ConsentController.json))])
        case "history":
            let events = try await consent.history(installation: installation)
            return .json(["fid": .string(installation.fid), "history": .array(events.map(ConsentController.json))])
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
