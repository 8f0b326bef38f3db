import Foundation
import HTTP
import JSON
import Registry

/// Send feedback: the results a sender got back (FCM, APNs, web push, legacy FCM, or gorush's feedback hook), the
/// hygiene report, and the operator's clearance of a tripped breaker (docs/feedback.md).
struct FeedbackController: Sendable {
    let feedback: FeedbackService
    let metrics: Metrics
    /// The hygiene report counts the project's registrations (seconds on ten million): one count a project at a time
    /// and at most one every ``reportAge``, whoever asks; a breaker cleared here is shown at once.
    let reports = SharedRounds<HygieneReport>(ttl: FeedbackController.reportAge)
    static let reportAge: Duration = .seconds(30)

    func register(_ routes: inout Routes) {
        routes.add(.POST, "/v1/projects/{project}/feedback", .serverKey, audit: .resource("feedback.intake", "feedback"), intake)
        routes.add(
            .POST, "/v1/projects/{project}/feedback:gorush", .serverKey, audit: .resource("feedback.gorush", "feedback"),
            gorush)
        routes.add(.GET, "/v1/projects/{project}/hygiene", .serverKey, hygiene)
        // FCM's send routes, for a proxy that routed all of fcm.googleapis.com here: this service sends nothing.
        routes.add(.POST, "/v1/projects/{project}/messages:send", .anyone, notASender)
        routes.add(.POST, "/fcm/send", .anyone, notASender)
        routes.add(
            .POST, "/v1/projects/{project}/hygiene/breakers/{channel}:clear", .serverKey,
            audit: .resource("hygiene.clearBreaker", "hygiene/breakers/{channel}"), clear)
    }

    /// One decision per result, in order: what the result meant and what it did; or why it was not read.
    enum Decision {
        case applied(SendOutcome, FeedbackAction)
        case rejected(String)

        var json: JSONValue {
            switch self {
            case let .applied(outcome, action):
                return [
                    "class": .string(outcome.feedbackClass.rawValue), "code": .string(outcome.code),
                    "channel": .string(outcome.channel.rawValue), "action": .string(action.rawValue),
                ]
            case let .rejected(message): return ["action": "rejected", "error": .string(message)]
            }
        }
    }

    // MARK: - Intake

    /// `POST /v1/projects/{project}/feedback`: `{"results": [{"token", "fcm" | "apns" | "webpush" | "legacy"}]}`.
    func intake(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let body = FieldReader(try context.jsonObject())
        let items = try body.array("results", required: true, maxCount: FeedbackService.maxBatch)!
        let read = items.enumerated().map { n, item in Read { try Self.result(item, path: "results[\(n)]") } }
        return try await apply(read, project: caller.project)
    }

    /// `POST /v1/projects/{project}/feedback:gorush`: gorush's feedback hook body (`logx.LogPushEntry`), as gorush
    /// posts it for each push (one object), or an array of them.
    func gorush(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let json = try context.jsonObjectOrArray()
        let entries = json.arrayValue ?? [json]
        guard entries.count <= FeedbackService.maxBatch else {
            throw APIError.invalid("body: at most \(FeedbackService.maxBatch) entries")
        }
        let read = entries.enumerated().map { n, entry in
            Read { try Self.gorushEntry(entry, path: json.arrayValue == nil ? "" : "[\(n)]") }
        }
        return try await apply(read, project: caller.project)
    }

    /// One item of a batch, read: a result, or why it is not one (the others still count).
    enum Read {
        case result(FeedbackResult)
        case rejected(String)

        init(_ body: () throws -> FeedbackResult) {
            do {
                self = .result(try body())
            } catch {
                self = .rejected((error as? APIError)?.message ?? "\(error)")
            }
        }
    }

    private func apply(_ read: [Read], project: Project) async throws -> HTTPResponse {
        let valid = read.compactMap { if case let .result(r) = $0 { r } else { nil } }
        let actions = try await feedback.apply(project: project, valid)
        metrics.record(feedback: valid, actions: actions)
        var next = actions.makeIterator()
        let decisions: [JSONValue] = read.map { item in
            switch item {
            case let .result(result): return Decision.applied(result.outcome, next.next() ?? .ignored).json
            case let .rejected(message): return Decision.rejected(message).json
            }
        }
        return .json(["decisions": .array(decisions)])
    }

    /// A token as senders send it: an FCM registration token or an APNs device token.
    static func token(_ reader: FieldReader, path: String) throws -> String {
        let token = try reader.string("token", required: true, maxBytes: RegistrationToken.maxBytes)!
        guard RegistrationToken.isValid(token) else {
            throw APIError.invalid(
                "\(path.isEmpty ? "" : path + ".")token: 1-\(RegistrationToken.maxBytes) characters of A-Z a-z 0-9 _ : . -")
        }
        return token
    }

    static func result(_ item: JSONValue, path: String) throws -> FeedbackResult {
        guard case .object = item else { throw APIError.invalid("\(path): must be an object, not \(item.typeName)") }
        let reader = FieldReader(item, path: path)
        let token = try token(reader, path: path)
        let present = ["fcm", "apns", "webpush", "legacy"].filter { item[$0].map { !$0.isNull } ?? false }
        guard present.count == 1 else {
            throw APIError.invalid("\(path): exactly one of fcm, apns, webpush or legacy is required")
        }
        switch present[0] {
        case "fcm":
            guard let fcm = item["fcm"], case .object = fcm else {
                throw APIError.invalid("\(path).fcm: must be the FCM error response body, an object")
            }
            return FeedbackResult(token: token, outcome: FeedbackClassifier.fcm(fcm))
        case "apns":
            let apns = try reader.object("apns")!
            let status = try apns.integer("status", in: 100...599)
            let reason = try apns.text("reason", maxBytes: 64)
            guard status != nil || reason != nil else {
                throw APIError.invalid("\(path).apns: status or reason is required")
            }
            let timestamp = try apns.integer("timestamp", in: 0...(1 << 50))
            return FeedbackResult(
                token: token, outcome: FeedbackClassifier.apns(status: status, reason: reason, timestamp: timestamp.map(Int64.init)))
        case "webpush":
            let webpush = try reader.object("webpush")!
            guard let status = try webpush.integer("status", in: 100...599) else {
                throw APIError.invalid("\(path).webpush.status: required field is missing")
            }
            return FeedbackResult(token: token, outcome: FeedbackClassifier.webpush(status: status))
        default:
            let code = try reader.text("legacy", required: true, maxBytes: 64)!
            return FeedbackResult(token: token, outcome: FeedbackClassifier.legacy(code))
        }
    }

    static func gorushEntry(_ entry: JSONValue, path: String) throws -> FeedbackResult {
        guard case .object = entry else {
            throw APIError.invalid("\(path.isEmpty ? "body" : path): must be gorush's feedback object, not \(entry.typeName)")
        }
        let reader = FieldReader(entry, path: path)
        let type = try reader.text("type", required: true, maxBytes: 32)!
        let platform = try reader.text("platform", required: true, maxBytes: 32)!
        let error = try reader.text("error", maxBytes: 1024) ?? ""
        if let token = try reader.string("token", maxBytes: RegistrationToken.maxBytes),
            token.contains("*") || token.isEmpty
        {
            throw APIError.invalid(
                "\(path.isEmpty ? "" : path + ".")token: hidden by gorush (set log.hide_token: false to send feedback)")
        }
        let token = try token(reader, path: path)
        guard let outcome = FeedbackClassifier.gorush(type: type, platform: platform, error: error) else {
            throw APIError.invalid(
                "\(path.isEmpty ? "" : path + ".")type/platform: failed-push or succeeded-push, for ios or android")
        }
        return FeedbackResult(token: token, outcome: outcome)
    }

    // MARK: - Report and breakers

    /// 501 `UNIMPLEMENTED`, never the 404 an unknown path gets: the admin SDKs read a send's `NOT_FOUND` as "the
    /// token is not registered" (firebase-admin-node `messaging-errors-internal.ts`), and the pruning code that
    /// follows deletes every token the backend holds. `UNIMPLEMENTED` is an unknown error there: nothing is pruned.
    func notASender(_ context: RequestContext, _: Anyone) async throws -> HTTPResponse {
        throw APIError(
            501, "UNIMPLEMENTED",
            "this registry does not send messages: route \(context.template) to fcm.googleapis.com, and only the "
                + "topicSubscriptions paths of that host here")
    }

    /// `GET /v1/projects/{project}/hygiene`.
    func hygiene(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let (feedback, project) = (feedback, caller.project)
        let report = try await reports.value(for: project.id) { try await feedback.report(project: project) }
        let states = ["active", "disabled", "retired"].map { ($0, JSONValue.int(Int64(report.byState[$0] ?? 0))) }
        let recent: [JSONValue] = FeedbackChannel.allCases.compactMap { channel in
            guard let counts = report.recent[channel] else { return nil }
            let byClass = FeedbackClass.allCases.compactMap { c in counts[c].map { (c.rawValue, JSONValue.int(Int64($0))) } }
            return .object([
                ("channel", .string(channel.rawValue)), ("results", .int(Int64(counts.values.reduce(0, +)))),
                ("byClass", .object(byClass)),
            ])
        }
        let breakers: [JSONValue] = report.breakers.map { b in
            var members: [(String, JSONValue)] = [
                ("channel", .string(b.channel.rawValue)), ("state", b.tripped ? "tripped" : "clear"),
                ("failing", .int(Int64(b.failing))), ("results", .int(Int64(b.results))),
            ]
            if let at = b.trippedAt { members.append(("tripTime", .string(Timestamp.rfc3339(at)))) }
            if let at = b.clearedAt { members.append(("clearTime", .string(Timestamp.rfc3339(at)))) }
            return .object(members)
        }
        let policy = feedback.policy
        return .json([
            "registrations": .object(states + [("quarantined", .int(Int64(report.quarantined)))]),
            "retiredByReason": .object(report.retiredByReason.sorted { $0.key < $1.key }.map { ($0.key, .int(Int64($0.value))) }),
            "recentFeedback": ["windowSeconds": .int(Int64(policy.window)), "channels": .array(recent)],
            "breakers": .array(breakers),
            "policy": [
                "breakerPercent": .int(Int64((policy.breakerShare * 100).rounded())),
                "breakerMinimum": .int(Int64(policy.breakerMinimum)),
                "retiredRetentionSeconds": .int(Int64(policy.retiredRetention)),
            ],
        ])
    }

    /// `POST /v1/projects/{project}/hygiene/breakers/{channel}:clear`, `{"confirm": bool}`: dismisses the trip (what
    /// it held is released) or confirms it (what it held is retired).
    func clear(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        guard let channel = FeedbackChannel(rawValue: context.parameter("channel")) else {
            throw APIError.invalid("channel: one of fcm, apns, webpush")
        }
        let confirm = try FieldReader(try context.jsonObject(allowEmpty: true)).bool("confirm") ?? false
        let cleared = try await feedback.clearBreaker(project: caller.project, channel: channel, confirm: confirm)
        reports.forget(caller.project.id)
        return .json([
            "channel": .string(channel.rawValue), "state": "clear",
            "released": .int(Int64(cleared.released)), "retired": .int(Int64(cleared.retired)),
        ])
    }
}
