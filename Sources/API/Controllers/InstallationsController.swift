import HTTP
import JSON
import Registry

/// Firebase Installations (FIS v1): create, generate auth token, delete; plus the server-side deletes.
struct InstallationsController {
    let installations: InstallationService
    let catalog: Catalog
    let createLimits: CreateLimits

    struct CreateLimits: Sendable {
        let perKey: RateLimiter
        let perAddress: RateLimiter
        /// Proxies in front of the service that append to `X-Forwarded-For` (0: take the socket's address).
        let trustedProxyHops: Int
    }

    func register(_ routes: inout Routes) {
        routes.add(.POST, "/v1/projects/{project}/installations", .apiKey, browser: true, create)
        routes.add(
            .POST, "/v1/projects/{project}/installations/{fid}/authTokens:generate", .refreshToken, browser: true,
            generate)
        // The client deletes itself with its refresh token; an app backend deletes with its server key.
        routes.add(
            .DELETE, "/v1/projects/{project}/installations/{fid}",
            .either(.serverKey, when: { $0.hasBearer }, otherwise: .refreshToken), browser: true,
            audit: .installation("installations.delete"), delete)
        routes.add(
            .DELETE, "/v1/project/{project}/instanceId/{fid}", .serverKey, audit: .installation("installations.delete"),
            adminDelete)
    }

    func create(_ context: RequestContext, _ caller: AppCaller) async throws -> HTTPResponse {
        let project = caller.project
        try limit(context, apiKey: caller.apiKey)
        let body = FieldReader(try context.jsonObject())
        // Check every field's shape first, then look anything up.
        let appID = try body.string("appId", required: true, maxBytes: 128, allowEmpty: false)!
        guard Identifiers.isValidAppID(appID) else {
            throw APIError.invalid("appId: not a valid app ID (1:<number>:<platform>:<id>)")
        }
        if let version = try body.string("authVersion", maxBytes: 32), version != "FIS_v2" {
            throw APIError.invalid("authVersion: only FIS_v2 is supported")
        }
        let sdkVersion = try body.text("sdkVersion", maxBytes: 64)
        // Any fid is accepted here; an empty, malformed or taken one is replaced in the response.
        let requested = try? body.string("fid", maxBytes: 256)
        guard let app = try await catalog.app(id: appID) else { throw APIError.invalid("appId: no such app") }
        guard app.projectID == project.id else {
            throw APIError.permissionDenied("appId: the app does not belong to project \(project.id)")
        }
        // From a page, the key must be the app's own (or shared by it): another app's key (an iOS or Android key, in
        // every bundle, with no origin list) would open this app's installations to every origin. Native clients are
        // no page's to restrict, and Google takes any key of the project from them: so does this.
        guard context.header("origin") == nil || caller.apps.contains(where: { $0.id == app.id }) else {
            throw APIError.permissionDenied("appId: the API key is not one of app \(app.id)'s keys")
        }
        let created = try await installations.create(
            project: project, app: app, requestedFID: requested ?? nil, sdkVersion: sdkVersion)
        return .json([
            "name": .string(created.name), "fid": .string(created.fid), "refreshToken": .string(created.refreshToken),
            "authToken": [
                "token": .string(created.authToken.token), "expiresIn": .string("\(created.authToken.expiresIn)s"),
            ],
        ])
    }

    func generate(_ context: RequestContext, _ caller: InstallationCaller) async throws -> HTTPResponse {
        // The body is optional ({"installation":{"sdkVersion","appId"?}}); check its shape when present.
        let body = FieldReader(try context.jsonObject(allowEmpty: true))
        var sdkVersion: String?
        if let installation = try body.object("installation") {
            sdkVersion = try installation.text("sdkVersion", maxBytes: 64)
            _ = try installation.string("appId", maxBytes: 128)
        }
        let token = try await installations.generateAuthToken(
            project: caller.project, for: caller.installation, sdkVersion: sdkVersion)
        return .json(["token": .string(token.token), "expiresIn": .string("\(token.expiresIn)s")])
    }

    func delete(_ context: RequestContext, _ caller: OneOf<ServerCaller, InstallationCaller>) async throws
        -> HTTPResponse
    {
        switch caller {
        case let .first(server):
            try await serverDelete(project: server.project, fid: context.parameter("fid"), trace: context.trace)
        case let .second(client):
            let fid = client.installation.fid
            guard try await installations.delete(
                projectID: client.project.id, fid: fid, reason: .client, traceparent: context.trace.header) else {
                throw APIError.notFound("installation \(fid) not found")
            }
        }
        return .json([:])
    }

    /// The admin SDKs' route (`delete_instance_id`, `deleteInstallation`): 404 unknown, 409 already deleted.
    func adminDelete(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        try await serverDelete(project: caller.project, fid: context.parameter("fid"), trace: context.trace)
        return .json([:])
    }

    private func serverDelete(project: Project, fid: String, trace: TraceContext) async throws {
        guard Identifiers.isValidFID(fid) else { throw APIError.invalid("fid: not a valid installation ID") }
        if try await installations.delete(
            projectID: project.id, fid: fid, reason: .server, traceparent: trace.header) { return }
        if try await installations.wasDeleted(project: project, fid: fid) {
            throw APIError(409, "ABORTED", "installation \(fid) was already deleted")
        }
        throw APIError.notFound("installation \(fid) not found")
    }

    /// The per-address limit first; the per-key bucket is charged only for requests that pass it, so one address
    /// flooding creates cannot starve every other device of the app.
    private func limit(_ context: RequestContext, apiKey: String) throws {
        let address = ClientAddress.limiterKey(of: context.request, trustedProxyHops: createLimits.trustedProxyHops)
        if let wait = createLimits.perAddress.acquire(address) ?? createLimits.perKey.acquire(apiKey) {
            throw APIError.exhausted("too many installations created; retry after \(wait) s", retryAfter: wait)
        }
    }
}

/// The client's address, as the socket saw it or as trusted proxies recorded it.
enum ClientAddress {
    /// With `trustedProxyHops` = N > 0, the Nth `X-Forwarded-For` entry from the right: the one the outermost
    /// trusted proxy wrote (entries to its left are client-written and may be forged). A request with fewer entries
    /// than that did not come through the proxies: the socket's address counts.
    static func of(_ request: HTTPRequest, trustedProxyHops: Int) -> String {
        let socket = request.remoteHost
        guard trustedProxyHops > 0 else { return socket }
        let entries = request.headers.values("x-forwarded-for").flatMap { $0.split(separator: ",") }.map {
            $0.trimmingCharacters(in: " \t")
        }
        guard entries.count >= trustedProxyHops else { return socket }
        let entry = entries[entries.count - trustedProxyHops]
        return entry.isEmpty || entry.utf8.count > 64 ? socket : entry
    }

    /// The key the request's client address counts under in a per-address limit (``limiterKey(_:)``).
    static func limiterKey(of request: HTTPRequest, trustedProxyHops: Int) -> String {
        limiterKey(of(request, trustedProxyHops: trustedProxyHops))
    }

    /// The key a per-address limit counts under: an IPv4 address as is (an IPv4-mapped IPv6 one as its IPv4), an
    /// IPv6 address by its /64 (one subscriber's whole prefix: a client that picks a new address of its /64 a request
    /// is still one client); anything else as written.
    static func limiterKey(_ address: String) -> String {
        guard address.contains(":"), case let .v6(bytes)? = IPAddress.literal(address) else { return address }
        if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff {
            return "\(bytes[12]).\(bytes[13]).\(bytes[14]).\(bytes[15])"
        }
        return IPAddress.v6(Array(bytes[0..<8]) + [UInt8](repeating: 0, count: 8)).description + "/64"
    }
}
