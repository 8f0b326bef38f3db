import Crypto
import Foundation
import HTTP
import JSON
import Registry

/// Data-subject exports (GDPR Art. 15 and 20): everything held about a person or an installation as one JSON document
/// of a versioned schema (`SubjectExport` in `openapi.yaml`). Tokens are masked: an export must not become a way to
/// take a sendable credential out; each carries its SHA-256, so a subject can match it against the device's own.
struct ExportController {
    let exports: ExportService
    let users: UserService
    let imports: ImportService
    let clock: any WallClock
    /// A project's export reads the whole project: one at a time for a project on a replica (429 beyond it).
    let projectExports = StreamSlots(perProject: 1)
    /// A person's or an installation's export holds one stream each: a few at a time for a project.
    let subjectExports = StreamSlots(perProject: 4)

    func register(_ routes: inout Routes) {
        routes.add(
            .GET, "/v1/projects/{project}/users/{userId}:export", .serverKey, audit: .user("users.export"), user)
        routes.add(
            .GET, "/v1/projects/{project}/installations/{fid}:export", .serverKey,
            audit: .installation("installations.export"), installation)
        routes.add(.GET, "/v1/projects/{project}:export", .serverKey, audit: .resource("projects.export", "project"), project)
    }

    /// The project's own data, every installation a JSON line (``RegistryExportFormat``), tokens in clear: streamed a
    /// page of 1000 installations at a time, so it holds one page, whatever the project's size.
    func project(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let imports = imports
        let slot = try projectExports.take(
            project.id, or: "an export of the project is under way; retry when it ends", retryAfter: 5)
        var response = HTTPResponse(status: 200, headers: ["content-type": "application/x-ndjson"])
        response.stream = ResponseBody { writer in
            defer { slot.release() }
            try await writer.write(RegistryExportFormat.header(projectID: project.id).encoded() + [10])
            try await imports.export(project: project) { bytes in try await writer.write(bytes) }
        }
        return response
    }

    /// Streamed: the head, then one installation at a time (each read as it is written), then the person's history
    /// and erasures. What fails before the head is answered as an error; what fails after it cuts the body short.
    func user(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let userID = try UserService.validate(userID: context.parameter("userId"))
        let project = caller.project
        let slot = try subjectExports.take(
            project.id, or: "too many subject exports of the project under way; retry", retryAfter: 5)
        let outline = try await exports.user(outline: project, userID: userID)
        let exports = exports
        return document(slot: slot,
            project: project, subject: ["type": "user", "userId": .string(userID)],
            installations: { write in
                var first = true
                for fid in outline.fids {
                    if let export = try await exports.installation(project: project, fid: fid) {
                        if !first { try await write(Array(",".utf8)) }
                        first = false
                        try await Self.write(export, onlyUser: userID, exports: exports, to: write)
                    }
                }
            },
            after: [
                ("userHistory", .array(outline.history.map(Self.json))),
                ("erasures", .array(outline.erasures.map { UsersController.json($0, project: project) })),
            ])
    }

    func installation(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let fid = context.parameter("fid")
        let slot = try subjectExports.take(
            caller.project.id, or: "too many subject exports of the project under way; retry", retryAfter: 5)
        guard let export = try await exports.installation(project: caller.project, fid: fid) else {
            throw APIError.notFound("installation \(fid.prefix(64)) not found")
        }
        let exports = exports
        return document(slot: slot,
            project: caller.project, subject: ["type": "installation", "fid": .string(fid)],
            installations: { write in try await Self.write(export, onlyUser: nil, exports: exports, to: write) },
            after: [])
    }

    /// The document, streamed: its head members, `installations` as `items` writes them (the bytes of the array's
    /// elements and the commas between them), then `after`.
    private func document(
        slot: StreamSlots.Slot, project: Project, subject: JSONValue,
        installations items: @escaping @Sendable (_ write: ([UInt8]) async throws -> Void) async throws -> Void,
        after: [(String, JSONValue)]
    ) -> HTTPResponse {
        let head: [(String, JSONValue)] = [
            ("schema", .string(ExportService.schemaVersion)), ("project", .string(project.id)),
            ("exportTime", .string(Timestamp.rfc3339(clock.now()))), ("subject", subject),
        ]
        func members(_ list: [(String, JSONValue)]) -> [UInt8] {
            var out: [UInt8] = []
            for (name, value) in list {
                out += Array(",".utf8) + JSONValue.string(name).encoded() + Array(":".utf8) + value.encoded()
            }
            return out
        }
        let opening = Array("{".utf8) + Array(members(head).dropFirst()) + Array(",\"installations\":[".utf8)
        let closing = Array("]".utf8) + members(after) + Array("}".utf8)
        var response = HTTPResponse(status: 200, headers: ["content-type": "application/json; charset=utf-8"])
        response.stream = ResponseBody { writer in
            defer { slot.release() }
            try await writer.write(opening)
            try await items { bytes in try await writer.write(bytes) }
            try await writer.write(closing)
        }
        return response
    }

    /// One installation's object, written as it is read: what is bounded (``json(_:onlyUser:)``) at once, then its
    /// consent ledger and its change-feed events a page at a time (``ExportService/pageSize``), which grow with what
    /// the installation does: an installation that re-sent its consent a million times is a million entries, never
    /// held at once.
    static func write(
        _ export: InstallationExport, onlyUser: String?, exports: ExportService,
        to write: ([UInt8]) async throws -> Void
    ) async throws {
        var head = json(export, onlyUser: onlyUser).encoded()
        head.removeLast()  // its closing brace: the paged members follow
        try await write(head + Array(#","consentLedger":["#.utf8))
        var ledger = PagedArrayWriter(pageSize: ExportService.pageSize)
        try await ledger.pages(
            { try await exports.ledger(of: export, after: $0) }, place: \.sequence, json: json, to: write)
        try await write(Array(#"],"events":["#.utf8))
        var events = PagedArrayWriter(pageSize: ExportService.pageSize)
        try await events.pages(
            { try await exports.events(of: export, after: $0) }, place: \.sequence,
            json: { json($0, onlyUser: onlyUser) }, to: write)
        // Then those not yet relayed, by their place in the outbox.
        try await events.pages(
            { try await exports.pendingEvents(of: export, after: $0) }, place: \.id,
            json: { json($0.event, onlyUser: onlyUser) }, to: write)
        try await write(Array("]}".utf8))
    }

    // MARK: - Masking

    /// A token as an export shows it: the FID it starts with (the subject's own ID), a few characters of each end, and
    /// its SHA-256.
    static func masked(_ token: String) -> JSONValue {
        let characters = Array(token)
        var shown: String
        if let fid = RegistrationToken.fid(of: token) {
            let rest = Array(token.dropFirst(fid.count + 1))
            shown = fid + ":" + (rest.count > 10 ? String(rest.prefix(4)) + "…" + String(rest.suffix(4)) : "…")
        } else {
            shown = characters.count > 12 ? String(characters.prefix(4)) + "…" + String(characters.suffix(4)) : "…"
        }
        return ["masked": .string(shown), "sha256": .string(Hex.encode(SHA256.hash(token)))]
    }

    /// A web push endpoint as an export shows it: its origin only (the path is the push service's capability URL).
    static func origin(of endpoint: String) -> String {
        guard let url = URL(string: endpoint), let scheme = url.scheme, let host = url.host else { return "…" }
        return "\(scheme)://\(host)"
    }

    // MARK: - The document's parts

    /// The installation's object without its consent ledger and events (``write(_:onlyUser:exports:to:)`` adds them).
    static func json(_ e: InstallationExport, onlyUser: String?) -> JSONValue {
        var members: [(String, JSONValue)] = [("fid", .string(e.fid)), ("deleted", .bool(e.installation == nil))]
        if let i = e.installation {
            members += [
                ("appId", .string(i.appID)), ("sdkVersion", i.sdkVersion.map { .string($0) } ?? .null),
                ("createTime", .string(Timestamp.rfc3339(i.createdAt))),
                ("lastSeenTime", .string(Timestamp.rfc3339(i.lastSeenAt))),
            ]
        }
        members.append(
            (
                "user",
                e.binding.map {
                    ["userId": .string($0.userID), "bindTime": .string(Timestamp.rfc3339($0.boundAt))]
                } ?? .null
            ))
        var registrations: [JSONValue] = e.registration.map { [json($0)] } ?? []
        registrations += e.senderTokens.map { t in
            [
                "kind": "sender", "sender": .string(t.sender), "scope": .string(t.scope), "token": masked(t.token),
                "createTime": .string(Timestamp.rfc3339(t.createdAt)),
                "refreshTime": .string(Timestamp.rfc3339(t.refreshedAt)),
            ]
        }
        let consents: [JSONValue] = e.consents.map { c in
            [
                "purpose": .string(c.purpose), "granted": .bool(c.granted),
                "policyVersion": c.policyVersion.map { .string($0) } ?? .null,
                "source": c.source.map { .string($0) } ?? .null, "actor": .string(c.actor.rawValue),
                "updateTime": .string(Timestamp.rfc3339(c.updatedAt)),
            ]
        }
        let topics: [JSONValue] = e.topics.map {
            ["topic": .string($0.topic), "createTime": .string(Timestamp.rfc3339($0.createdAt))]
        }
        let history: [JSONValue] = e.history.map { event in
            json(onlyUser.map { only($0, event) } ?? event)
        }
        members += [
            ("registrations", .array(registrations)), ("consents", .array(consents)), ("topics", .array(topics)),
            ("userHistory", .array(history)), ("deletion", e.deletion.map(DeletionsController.json) ?? .null),
        ]
        return .object(members)
    }

    /// A consent ledger entry.
    static func json(_ c: ConsentEvent) -> JSONValue {
        [
            "sequence": .string(String(c.sequence)), "purpose": .string(c.purpose), "granted": .bool(c.granted),
            "previous": c.previous.map { .bool($0) } ?? .null, "actor": .string(c.actor.rawValue),
            "source": c.source.map { .string($0) } ?? .null,
            "policyVersion": c.policyVersion.map { .string($0) } ?? .null,
            "recordTime": .string(Timestamp.rfc3339(c.recordedAt)),
        ]
    }

    static func json(_ r: Registration) -> JSONValue {
        var members: [(String, JSONValue)] = [
            ("kind", "installation"), ("platform", .string(r.platform.rawValue)), ("token", masked(r.token)),
            ("state", .string(r.state.rawValue)), ("createTime", .string(Timestamp.rfc3339(r.createdAt))),
            ("refreshTime", .string(Timestamp.rfc3339(r.refreshedAt))),
            ("appVersion", r.appVersion.map { .string($0) } ?? .null),
            ("sdkVersion", r.sdkVersion.map { .string($0) } ?? .null),
        ]
        if r.platform == .ios {
            members += [
                ("apnsToken", r.apnsToken.map(masked) ?? .null),
                ("apnsEnvironment", r.apnsEnvironment.map { .string($0.rawValue) } ?? .null),
                ("bundleId", r.bundleID.map { .string($0) } ?? .null),
            ]
        }
        if let web = r.web {
            // The keys are the subscription's secrets: neither is exported.
            members.append(
                ("webPush", ["endpointOrigin": .string(origin(of: web.endpoint)), "origin": web.origin.map { .string($0) } ?? .null]))
        }
        if let retirement = r.retirement {
            members.append(
                (
                    "retirement",
                    [
                        "reason": .string(retirement.reason), "channel": .string(retirement.channel.rawValue),
                        "time": .string(Timestamp.rfc3339(retirement.at)),
                    ]
                ))
        }
        if let quarantine = r.quarantine {
            members.append(
                (
                    "quarantine",
                    [
                        "reason": .string(quarantine.reason), "channel": .string(quarantine.channel.rawValue),
                        "time": .string(Timestamp.rfc3339(quarantine.at)),
                    ]
                ))
        }
        return .object(members)
    }

    /// A history entry with only the subject's own user ID in clear.
    static func only(_ userID: String, _ e: BindingEvent) -> BindingEvent {
        BindingEvent(
            fid: e.fid, action: e.action, userID: e.userID == userID ? e.userID : nil, userHash: e.userHash,
            previousUserID: e.previousUserID == userID ? e.previousUserID : nil, previousUserHash: e.previousUserHash,
            at: e.at)
    }

    static func json(_ e: BindingEvent) -> JSONValue {
        [
            "fid": .string(e.fid), "action": .string(e.action.rawValue), "userId": e.userID.map { .string($0) } ?? .null,
            "previousUserId": e.previousUserID.map { .string($0) } ?? .null, "time": .string(Timestamp.rfc3339(e.at)),
        ]
    }

    /// A feed event; in a person's export, any other person's user ID in it is left out.
    static func json(_ e: FeedEvent, onlyUser: String?) -> JSONValue {
        var data = e.data
        if let onlyUser, case let .object(fields)? = data {
            data = .object(
                fields.map { name, value in
                    (name == "userId" || name == "previousUserId") && value.stringValue != onlyUser
                        ? (name, .null) : (name, value)
                })
        }
        return [
            "sequence": e.sequence > 0 ? .string(String(e.sequence)) : .null, "type": .string(e.type.rawValue),
            "time": .string(Timestamp.rfc3339(e.time)), "data": data ?? .null,
        ]
    }
}
