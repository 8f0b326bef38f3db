import Crypto
import Foundation
import HTTP
import JSON
import Registry

/// The Instance ID server API (`iid.googleapis.com`), as firebase-admin's `*_legacy` topic functions and the Node
/// admin SDK call it. The project comes from the server key. Errors use IID's own shape, `{"error":"<CODE>"}`.
struct IIDController: Sendable {
    let catalog: Catalog
    let registrations: RegistrationService
    let topics: TopicService
    let installations: InstallationService

    static let maxBatch = 1000
    static let maxImport = 100

    func register(_ routes: inout Routes) {
        // Every failure in IID's own shape, including malformed JSON; an unavailable database stays a 503.
        let key = Principal.serverKeyOfAnyProject
        routes.add(.POST, "/iid/v1:batchAdd", key, errors: .iid, audit: .resource("iid.batchAdd", "topics"), batchAdd)
        routes.add(
            .POST, "/iid/v1:batchRemove", key, errors: .iid, audit: .resource("iid.batchRemove", "topics"), batchRemove)
        routes.add(
            .POST, "/iid/v1:batchImport", key, errors: .iid, audit: .resource("iid.batchImport", "registrations"),
            batchImport)
        routes.add(
            .POST, "/iid/v1/{token}/rel/topics/{topic}", key, errors: .iid,
            audit: .registration("iid.addRelation", "token"), addRelation)
        routes.add(
            .DELETE, "/iid/v1/{token}/rel/topics/{topic}", key, errors: .iid,
            audit: .registration("iid.removeRelation", "token"), removeRelation)
        routes.add(.GET, "/iid/info/{token}", key, errors: .iid, info)
    }

    static func error(_ status: Int, _ code: String) -> HTTPResponse { .json(["error": .string(code)], status: status) }

    /// A missing or wrong server key: Google's front end answers IID's 401 with its HTML page, not IID's JSON, and
    /// the Node admin SDK reads only a 401 without JSON as `messaging/authentication-error` (`{"error":
    /// "UNAUTHENTICATED"}` would be an APNs certificate's `messaging/third-party-auth-error` there). The Python, Go
    /// and Java admin SDKs choose their error by the status alone.
    static func unauthorized() -> HTTPResponse {
        HTTPResponse(
            status: 401, contentType: "text/html; charset=UTF-8",
            body: "<HTML><HEAD><TITLE>Unauthorized</TITLE></HEAD><BODY BGCOLOR=\"#FFFFFF\" TEXT=\"#000000\">"
                + "<H1>Unauthorized</H1><H2>Error 401</H2></BODY></HTML>\n")
    }

    /// IID's error code for a subscription that was not made, nil when it was (or already existed).
    static func itemError(_ result: SubscribeResult?) -> String? {
        switch result {
        case .added?, .alreadyExists?: return nil
        case .tooManyTopics?: return "TOO_MANY_TOPICS"
        case .noConsent?: return "FAILED_PRECONDITION"
        case .notFound?, nil: return "NOT_FOUND"
        }
    }

    private func batchBody(_ context: RequestContext) throws -> (topic: String, tokens: [JSONValue]) {
        let body = FieldReader(try context.jsonObject())
        let to = try body.string("to", required: true, maxBytes: 1024)!
        let topic = try TopicService.name(to, field: "to")
        let tokens = try body.array("registration_tokens", required: true, maxCount: IIDController.maxBatch)!
        guard !tokens.isEmpty else { throw APIError.invalid("registration_tokens: must not be empty") }
        guard tokens.allSatisfy({ $0.stringValue != nil }) else {
            throw APIError.invalid("registration_tokens: every item must be a string")
        }
        return (topic, tokens)
    }

    /// Maps each input token (or FID) to its installation, or to the per-token error; results stay in input order.
    /// Two queries for the whole batch.
    private func resolve(_ tokens: [JSONValue], project: Project) async throws -> [Result<String, IIDFailure>] {
        let fids = try await registrations.installationFIDs(
            project: project, tokensOrFIDs: tokens.compactMap { $0.stringValue })
        return tokens.map { value in
            guard let token = value.stringValue, RegistrationToken.isValid(token) else {
                return .failure(IIDFailure(code: "INVALID_ARGUMENT"))
            }
            guard let fid = fids[token] else { return .failure(IIDFailure(code: "NOT_FOUND")) }
            return .success(fid)
        }
    }

    func batchAdd(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let (topic, tokens) = try batchBody(context)
        let resolved = try await resolve(tokens, project: project)
        let fids = resolved.compactMap { try? $0.get() }
        let outcome = try await topics.subscribe(project: project, fids: fids, topic: topic)
        let results: [JSONValue] = resolved.map { entry in
            switch entry {
            case let .failure(f): return ["error": .string(f.code)]
            case let .success(fid):
                return IIDController.itemError(outcome[fid]).map { ["error": .string($0)] } ?? [:]
            }
        }
        return .json(["results": .array(results)])
    }

    func batchRemove(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let (topic, tokens) = try batchBody(context)
        let resolved = try await resolve(tokens, project: project)
        _ = try await topics.unsubscribe(
            project: project, fids: resolved.compactMap { try? $0.get() }, topic: topic)
        let results: [JSONValue] = resolved.map { entry in
            if case let .failure(f) = entry { return ["error": .string(f.code)] }
            return [:]
        }
        return .json(["results": .array(results)])
    }

    private func relation(_ context: RequestContext, project: Project) async throws -> (fid: String, topic: String) {
        let topic = try TopicService.name(context.parameter("topic"), field: "topic")
        let token = context.parameter("token")
        guard RegistrationToken.isValid(token) else { throw APIError(400, "INVALID_ARGUMENT", "invalid token") }
        guard let fid = try await registrations.installationFIDs(project: project, tokensOrFIDs: [token])[token] else {
            throw APIError(404, "NOT_FOUND", "unknown token")
        }
        return (fid, topic)
    }

    func addRelation(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let (fid, topic) = try await relation(context, project: project)
        let outcome = try await topics.subscribe(project: project, fids: [fid], topic: topic)[fid]
        if let code = IIDController.itemError(outcome) {
            return IIDController.error(code == "NOT_FOUND" ? 404 : 400, code)
        }
        return .json([:])
    }

    func removeRelation(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let (fid, topic) = try await relation(context, project: project)
        _ = try await topics.unsubscribe(project: project, fids: [fid], topic: topic)
        return .json([:])
    }

    /// `GET /iid/info/{token}[?details=true]`; unknown tokens answer 404 `{"error":"InvalidToken"}`.
    func info(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let token = context.parameter("token")
        guard RegistrationToken.isValid(token),
            let fid = try await registrations.installationFIDs(project: project, tokensOrFIDs: [token])[token],
            let installation = try await installations.find(project: project, fid: fid)
        else { return IIDController.error(404, "InvalidToken") }
        // An FID-mode installation may have no registration: its app says what it is.
        let registration = try await registrations.find(project: project, tokenOrFID: fid)
        let app = try await catalog.app(id: installation.appID)
        let platform: Platform = registration?.platform ?? app?.platform ?? .web
        let platformName = ["ios": "IOS", "android": "ANDROID", "web": "CHROME"][platform.rawValue] ?? "UNKNOWN"
        var members: [(String, JSONValue)] = [
            ("application", .string(registration?.bundleID ?? app?.bundleID ?? installation.appID)),
            ("authorizedEntity", .string(String(project.number))), ("platform", .string(platformName)),
            ("scope", "*"),
        ]
        if let version = registration?.appVersion { members.append(("applicationVersion", .string(version))) }
        if ["true", "1"].contains(context.request.query("details")?.lowercased() ?? "") {
            let subscribed = try await topics.all(project: project, fid: fid).map {
                ($0.topic, ["addDate": .string(String(Timestamp.rfc3339($0.createdAt).prefix(10)))] as JSONValue)
            }
            members.append(("rel", ["topics": .object(subscribed)]))
        }
        return .json(.object(members))
    }

    /// `POST /iid/v1:batchImport`: APNs tokens (≤100) of an iOS app become registration tokens; each gets an
    /// installation made by the server. The same APNs token imported twice returns its existing token.
    func batchImport(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let body = FieldReader(try context.jsonObject())
        let application = try body.text("application", required: true, maxBytes: 255)!
        let sandbox = try body.bool("sandbox") ?? false
        let tokens = try body.array("apns_tokens", required: true, maxCount: IIDController.maxImport)!
        guard
            let app = try await catalog.apps(projectID: project.id).first(where: {
                $0.platform == .ios && $0.bundleID == application
            })
        else {
            return IIDController.error(404, "NOT_FOUND")
        }
        let outcomes = try await registrations.importAPNs(
            project: project, app: app, apnsTokens: tokens.map(\.stringValue), sandbox: sandbox)
        let results: [JSONValue] = zip(tokens, outcomes).map { value, outcome in
            switch outcome {
            case let .imported(apns, token):
                return ["apns_token": .string(apns), "status": "OK", "registration_token": .string(token)]
            case .invalid: return ["apns_token": value, "status": "INVALID_ARGUMENT"]
            case let .noConsent(apns): return ["apns_token": .string(apns), "status": "FAILED_PRECONDITION"]
            }
        }
        return .json(["results": .array(results)])
    }
}

struct IIDFailure: Error {
    let code: String
}
