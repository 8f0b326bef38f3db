import Crypto
import Foundation
import HTTP
import JSON
import Registry

/// Topic subscriptions in the FCM v1 shape (admin SDKs, server key) and the client verbs `:subscribe` /
/// `:unsubscribe` (installation auth token), plus who a topic or a condition reaches.
struct TopicsController: Sendable {
    let registrations: RegistrationService
    let topics: TopicService
    let targeting: TargetingService

    func register(_ routes: inout Routes) {
        let base = "/v1/projects/{project}/registrations/{registration}/topicSubscriptions"
        routes.add(.POST, base, .serverKey, audit: .registration("topics.subscribe"), create)
        routes.add(.GET, base, .serverKey, list)
        routes.add(.GET, base + "/{topic}", .serverKey, get)
        routes.add(.PATCH, base + "/{topic}", .serverKey, audit: .registration("topics.update"), patch)
        routes.add(.DELETE, base + "/{topic}", .serverKey, audit: .registration("topics.unsubscribe"), delete)
        let own = Principal.installationToken(owning: "registration", afterRotation: true)
        routes.add(.POST, base + "/{topic}:subscribe", own, browser: true, clientSubscribe)
        routes.add(.POST, base + "/{topic}:unsubscribe", own, browser: true, clientUnsubscribe)
        routes.add(.GET, "/v1/projects/{project}/topics/{topic}/registrations", .serverKey, members)
        routes.add(.POST, "/v1/projects/{project}/targets:resolve", .serverKey, resolve)
    }

    /// The installation named by `{registration}` (FID or token), for a server-key caller.
    private func serverSubject(_ context: RequestContext, _ caller: ServerCaller) async throws -> (Project, String) {
        let project = caller.project
        guard
            let fid = try await registrations.installationFID(
                project: project, tokenOrFID: context.parameter("registration"))
        else {
            // As FCM answers a token it does not know: firebase-admin reads the detail's errorCode before the status,
            // so a caller pruning on UNREGISTERED (the send side's code) prunes here too.
            var unknown = APIError.notFound("registration \(context.parameter("registration").prefix(200)) not found")
            unknown.details = [TopicsController.fcmError("UNREGISTERED")]
            throw unknown
        }
        return (project, fid)
    }

    static func fcmError(_ code: String) -> JSONValue {
        ["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": .string(code)]
    }

    static func topicName(_ raw: String?) throws -> String { try TopicService.name(raw, field: "topicName") }

    func subscription(_ context: RequestContext, _ subscription: TopicSubscription) -> JSONValue {
        let time = Timestamp.rfc3339(subscription.createdAt)
        let topic = subscription.topic
        return [
            "name": .string(
                "projects/\(context.parameter("project"))/registrations/\(context.parameter("registration"))/topicSubscriptions/\(topic)"
            ),
            "topicName": .string(topic), "topic_name": .string(topic), "createTime": .string(time),
            "create_time": .string(time),
        ]
    }

    static func allowMissing(_ context: RequestContext) throws -> Bool {
        switch context.request.query("allowMissing", "allow_missing")?.lowercased() {
        case nil, "false", "0": return false
        case "true", "1": return true
        case let other?: throw APIError.invalid("allowMissing: must be true or false, not \(other.prefix(16))")
        }
    }

    func create(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let body = try context.jsonObject(allowEmpty: true)
        let fromBody =
            try FieldReader(body).string("topicName", maxBytes: 1024)
            ?? (try FieldReader(body).string("topic_name", maxBytes: 1024))
        let topic = try TopicsController.topicName(context.request.query("topicName", "topic_name") ?? fromBody)
        let (project, fid) = try await serverSubject(context, caller)
        let (created, added) = try await subscribe(project: project, fid: fid, topic: topic)
        guard added else { throw APIError(409, "ALREADY_EXISTS", "the topic subscription already exists") }
        return .json(subscription(context, created))
    }

    /// Subscribes, answering FCM's `TOO_MANY_TOPICS` error when the installation is full.
    private func subscribe(project: Project, fid: String, topic: String) async throws -> (TopicSubscription, Bool) {
        do {
            return try await topics.subscribe(project: project, fid: fid, topic: topic)
        } catch let error as RegistryError where error == TopicService.tooManyTopics {
            var tooMany = APIError(400, "FAILED_PRECONDITION", error.message)
            tooMany.details = [TopicsController.fcmError("TOO_MANY_TOPICS")]
            throw tooMany
        }
    }

    func get(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let topic = try TopicsController.topicName(context.parameter("topic"))
        let (project, fid) = try await serverSubject(context, caller)
        guard let found = try await topics.subscription(project: project, fid: fid, topic: topic) else {
            throw APIError.notFound("topic subscription \(topic) not found")
        }
        return .json(subscription(context, found))
    }

    func list(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let (project, fid) = try await serverSubject(context, caller)
        let size = try Paging.pageSize(context, default: 1000, max: 2000)
        let after = try Paging.decode(context.request.query("pageToken", "page_token"))
        let page = try await topics.list(project: project, fid: fid, after: after, limit: size + 1)
        var members: [(String, JSONValue)] = [
            ("topicSubscriptions", .array(page.prefix(size).map { subscription(context, $0) }))
        ]
        if page.count > size, let last = page.prefix(size).last {
            members.append(("nextPageToken", .string(Paging.encode(last.topic))))
        }
        return .json(.object(members))
    }

    /// Upserts with `allowMissing`; otherwise the subscription must exist.
    func patch(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let topic = try TopicsController.topicName(context.parameter("topic"))
        let allowMissing = try TopicsController.allowMissing(context)
        _ = try context.jsonObject(allowEmpty: true)
        let (project, fid) = try await serverSubject(context, caller)
        if let found = try await topics.subscription(project: project, fid: fid, topic: topic) {
            return .json(subscription(context, found))
        }
        guard allowMissing else { throw APIError.notFound("topic subscription \(topic) not found") }
        return .json(subscription(context, try await subscribe(project: project, fid: fid, topic: topic).0))
    }

    func delete(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let topic = try TopicsController.topicName(context.parameter("topic"))
        let allowMissing = try TopicsController.allowMissing(context)
        let (project, fid) = try await serverSubject(context, caller)
        let removed = try await topics.unsubscribe(project: project, fids: [fid], topic: topic)
        guard !removed.isEmpty || allowMissing else { throw APIError.notFound("topic subscription \(topic) not found") }
        return .json([:])
    }

    // MARK: - Client verbs (FIS auth)

    private func clientSubject(_ context: RequestContext, _ caller: InstallationCaller) throws
        -> (Project, Installation, String)
    {
        (caller.project, caller.installation, try TopicsController.topicName(context.parameter("topic")))
    }

    func clientSubscribe(_ context: RequestContext, _ caller: InstallationCaller) async throws -> HTTPResponse {
        let (project, installation, topic) = try clientSubject(context, caller)
        return .json(
            subscription(context, try await subscribe(project: project, fid: installation.fid, topic: topic).0))
    }

    func clientUnsubscribe(_ context: RequestContext, _ caller: InstallationCaller) async throws -> HTTPResponse {
        let (project, installation, topic) = try clientSubject(context, caller)
        _ = try await topics.unsubscribe(project: project, fids: [installation.fid], topic: topic)
        return .json([:])
    }

    // MARK: - Targeting

    /// The most a page of targets writes before it ends early with a token for the rest: 4 MiB, above 10,000
    /// targets of FCM-sized tokens (about 270 bytes each with their fields: a sender's full page is never cut, and
    /// the rows read for it are never wasted). Tokens are what a tenant stores (up to 2,048 bytes), and a page of
    /// 10,000 of the longest was 21 MB held for as long as a slow reader kept its connection (an attacker's review):
    /// now any page is at most this and one target.
    static let maxPageBytes = 4 << 20

    /// A page of targets as JSON text, written straight into the response's bytes (a page holds up to 10,000 rows;
    /// building a `JSONValue` tree for it first cost a third of the page's time):
    /// `{"registrations":[{"token","fid","platform","stale","refreshTime"}…],"nextPageToken"?}`. It ends at
    /// ``maxPageBytes``, with the token of its last target, when more remain.
    static func targetsBody(_ page: [Target], size: Int, maxBytes: Int = maxPageBytes) -> [UInt8] {
        // Sized once: growing a megabyte-sized buffer page by page cost copies and page faults.
        var capacity = 128
        for t in page.prefix(size) {
            capacity += 120 + t.token.utf8.count + t.fid.utf8.count
            if capacity > maxBytes { break }
        }
        var out = [UInt8]()
        out.reserveCapacity(capacity + 4096)
        out.append(contentsOf: #"{"registrations":["#.utf8)
        var included = 0
        for t in page.prefix(size) {
            if included > 0 && out.count >= maxBytes { break }
            if included > 0 { out.append(UInt8(ascii: ",")) }
            included += 1
            out.append(contentsOf: #"{"token":"#.utf8)
            JSONValue.appendString(t.token, to: &out)
            out.append(contentsOf: #","fid":"#.utf8)
            JSONValue.appendString(t.fid, to: &out)
            out.append(contentsOf: #","platform":"#.utf8)
            JSONValue.appendString(t.platform.rawValue, to: &out)
            out.append(
                contentsOf: (t.stale ? #","stale":true,"refreshTime":""# : #","stale":false,"refreshTime":""#).utf8)
            Timestamp.appendRFC3339(t.refreshedAt, to: &out)
            out.append(contentsOf: (t.quarantined ? #"","quarantined":true}"# : #""}"#).utf8)
        }
        out.append(UInt8(ascii: "]"))
        if page.count > included, included > 0 {
            out.append(contentsOf: #","nextPageToken":"#.utf8)
            JSONValue.appendString(Paging.encode(page[included - 1].fid), to: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func targetsResponse(_ page: [Target], size: Int) -> HTTPResponse {
        HTTPResponse(
            status: 200, headers: ["content-type": "application/json; charset=utf-8"],
            body: targetsBody(page, size: size))
    }

    func members(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let topic = try TopicsController.topicName(context.parameter("topic"))
        let size = try Paging.pageSize(context, default: 1000, max: 10_000)
        let after = try Paging.decode(context.request.query("pageToken", "page_token"))
        let page = try await targeting.members(projectID: project.id, topic: topic, after: after, limit: size + 1)
        return TopicsController.targetsResponse(page, size: size)
    }

    func resolve(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let body = FieldReader(try context.jsonObject())
        let users = try Self.users(body)
        let text = try body.string(
            "condition", required: users == nil, maxBytes: Condition.maxLength, allowEmpty: false)
        var condition: Condition?
        if let text {
            do {
                condition = try Condition.parse(text)
            } catch {
                throw APIError.invalid("condition: \(error.description)")
            }
        }
        if let users { condition = condition.map { .and(.users(users), $0) } ?? .users(users) }
        guard let condition else { throw APIError.invalid("condition: required field is missing") }
        var size = 1000
        if let value = body.object["pageSize"] {
            guard let n = value.int64Value, n > 0 else {
                throw APIError.invalid("pageSize: must be a positive whole number")
            }
            size = Int(min(n, 10_000))
        }
        let after = try Paging.decode(try body.string("pageToken", maxBytes: 512))
        let page = try await targeting.resolve(
            projectID: project.id, condition: condition, after: after, limit: size + 1)
        return TopicsController.targetsResponse(page, size: size)
    }

    /// `users`: the people a message is for (their installations, under the same rules as any target); nil when
    /// absent.
    static func users(_ body: FieldReader) throws -> [String]? {
        guard let value = body.object["users"], !value.isNull else { return nil }
        guard let items = value.arrayValue else { throw APIError.invalid("users: must be an array of user IDs") }
        guard (1...UserPolicy.maxUsersPerResolve).contains(items.count) else {
            throw APIError.invalid("users: 1-\(UserPolicy.maxUsersPerResolve) user IDs")
        }
        return try items.enumerated().map { index, item in
            guard let id = item.stringValue else { throw APIError.invalid("users[\(index)]: must be a string") }
            return try UserService.validate(userID: id, field: "users[\(index)]")
        }
    }
}

/// Opaque keyset page tokens and page sizes.
enum Paging {
    static func encode(_ key: String) -> String { "p1." + Base64URL.encode(Array(key.utf8)) }

    static func decode(_ token: String?) throws -> String? {
        guard let token, !token.isEmpty else { return nil }
        guard token.hasPrefix("p1."), token.utf8.count <= 2048, let bytes = Base64URL.decode(token.dropFirst(3)),
            let key = String(validating: bytes, as: UTF8.self), Identifiers.isPlainText(key)
        else { throw APIError.invalid("pageToken: not a page token from this service") }
        return key
    }

    /// `pageSize` from the query: absent or 0 gives `default`; larger than `max` is coerced to `max`.
    static func pageSize(_ context: RequestContext, default value: Int, max: Int) throws -> Int {
        guard let text = context.request.query("pageSize", "page_size") else { return value }
        guard let n = Int(text), n >= 0 else { throw APIError.invalid("pageSize: must be a non-negative whole number") }
        return n == 0 ? value : min(n, max)
    }
}
