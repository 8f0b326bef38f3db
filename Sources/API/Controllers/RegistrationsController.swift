import Crypto
import Foundation
import HTTP
import JSON
import Registry

/// FCM client registrations (web and iOS bodies), the token refresh callback from app backends, and sendability.
struct RegistrationsController: Sendable {
    let registrations: RegistrationService
    let targeting: TargetingService

    func register(_ routes: inout Routes) {
        routes.add(.POST, "/v1/projects/{project}/registrations", .installationToken(), browser: true, create)
        routes.add(
            .PATCH, "/v1/projects/{project}/registrations/{registration}", .installationToken(), browser: true, update)
        // The installation removes its registration (by token or FID); an app backend may too, with a server key.
        routes.add(
            .DELETE, "/v1/projects/{project}/registrations/{registration}",
            .either(.serverKey, when: { $0.hasBearer }, otherwise: .installationTokenOrGone), browser: true,
            audit: .registration("registrations.delete"), delete)
        // The write appends the call's audit entry in its own statement: one round trip and one commit for both.
        routes.add(
            .PUT, "/v1/projects/{project}/installations/{fid}/registration", .serverKey,
            audit: .installation("registrations.refresh"), appendedBy: RegistrationWrite.Kind.self,
            answer: { RegistrationService.error($0, fid: "") }, callback)
        routes.add(
            .GET, "/v1/projects/{project}/registrations/{registration}:sendability", .serverKey, sendability)
    }

    func create(_ context: RequestContext, _ caller: InstallationCaller) async throws -> HTTPResponse {
        let (project, installation) = (caller.project, caller.installation)
        let request = try RegistrationsController.clientRegistration(try context.jsonObject())
        let stored = try await registrations.register(installation: installation, request)
        return .json(RegistrationsController.json(stored, project: project))
    }

    /// The weekly refresh: the same body, for the installation's own registration. The token in the path need not be
    /// the installation's current one (a browser moved from Google, a registration the registry expired or deleted,
    /// an FID that changed): the JS SDK rethrows anything but a token, and every later `getToken()` would fail, so
    /// the caller is registered and its token answered, as a create would.
    func update(_ context: RequestContext, _ caller: InstallationCaller) async throws -> HTTPResponse {
        let (project, installation) = (caller.project, caller.installation)
        let request = try RegistrationsController.clientRegistration(try context.jsonObject())
        let stored = try await registrations.register(installation: installation, request)
        return .json(RegistrationsController.json(stored, project: project))
    }

    func delete(_ context: RequestContext, _ caller: OneOf<ServerCaller, InstallationOrGone>) async throws
        -> HTTPResponse
    {
        let reference = context.parameter("registration")
        let project: Project
        let fid: String
        switch caller {
        case let .first(server):
            project = server.project
            guard let registration = try await registrations.find(project: project, tokenOrFID: reference) else {
                throw APIError.notFound("registration not found")
            }
            fid = registration.fid
        case .second(.gone):
            // The installation was deleted (by the app's backend, an erasure, its expiry) while the client kept its
            // auth token: its registrations went with it, and the JS SDK's `deleteToken()` goes on to clear its own
            // state and unsubscribe the push subscription only on a success.
            return .json([:])
        case let .second(.live(client)):
            project = client.project
            // A token the caller does not hold (another installation's, or none at all) is already not the caller's:
            // the JS SDK's `deleteToken()` then clears its own state, which an error would stop it from doing.
            guard let registration = try await registrations.find(project: project, tokenOrFID: reference),
                registration.fid == client.installation.fid
            else { return .json([:]) }
            fid = client.installation.fid
        }
        _ = try await registrations.delete(project: project, fid: fid)
        return .json([:])
    }

    /// `PUT /v1/projects/{project}/installations/{fid}/registration`: an app backend reports the token its client
    /// received. Idempotent; an older `clientTime` never replaces a newer token.
    func callback(
        _ context: RequestContext, _ caller: ServerCaller, _ audit: AuditCompanion<RegistrationWrite.Kind>?
    ) async throws -> HTTPResponse {
        let project = caller.project
        let fid = context.parameter("fid")
        guard Identifiers.isValidFID(fid) else { throw APIError.invalid("fid: not a valid installation ID") }
        let body = FieldReader(try context.jsonObject())
        let token = try body.string("token", required: true, maxBytes: RegistrationToken.maxBytes)!
        guard let platform = Platform(rawValue: try body.string("platform", required: true, maxBytes: 16)!) else {
            throw APIError.invalid("platform: must be ios, android or web")
        }
        let environment = try body.string("apnsEnvironment", maxBytes: 16)
        var apns: APNsDevice?
        if let apnsToken = try body.string("apnsToken", maxBytes: 200) {
            apns = try APNsDevice(
                token: apnsToken, environment: environment, tokenField: "apnsToken",
                environmentField: "apnsEnvironment")
        } else if let environment {
            _ = try APNsDevice.environment(environment, field: "apnsEnvironment")
        }
        var clientTime: Date?
        if let text = try body.string("clientTime", maxBytes: 64) {
            guard let parsed = Timestamp.parse(text) else {
                throw APIError.invalid("clientTime: must be an RFC 3339 time")
            }
            clientTime = parsed
        }
        let (stored, outcome) = try await registrations.refresh(
            project: project, fid: fid,
            TokenRefresh(token: token, platform: platform, apns: apns, clientTime: clientTime), audit: audit)
        var json = RegistrationsController.json(stored, project: project)
        if case var .object(members) = json {
            members.append(("outcome", .string(outcome.rawValue)))
            json = .object(members)
        }
        return .json(json)
    }

    func sendability(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let verdict = try await targeting.verdict(project: caller.project, token: context.parameter("registration"))
        var members: [(String, JSONValue)] = [
            ("sendable", .bool(verdict.reason.sendable)), ("reason", .string(verdict.reason.rawValue)),
        ]
        // Why send feedback retired it, or that it holds it in quarantine (still sendable).
        if let retirement = verdict.registration?.retirement, verdict.reason == .retired {
            members.append(("retiredReason", .string(retirement.reason)))
            members.append(("retireTime", .string(Timestamp.rfc3339(retirement.at))))
        }
        if let quarantine = verdict.registration?.quarantine {
            members.append(("quarantined", true))
            members.append(("quarantineReason", .string(quarantine.reason)))
        }
        return .json(.object(members))
    }

    // MARK: - Wire formats

    /// Reads a client body: exactly one of `web`, `ios`, `android`.
    static func clientRegistration(_ json: JSONValue) throws -> ClientRegistration {
        let body = FieldReader(json)
        let sdkVersion = try body.text("fcm_sdk_version", maxBytes: 64)
        let present = ["web", "ios", "android"].filter { json[$0].map { !$0.isNull } ?? false }
        guard present.count == 1 else { throw APIError.invalid("exactly one of web, ios or android is required") }
        if let web = try body.object("web") {
            let subscription = WebPush(
                endpoint: try web.string("endpoint", required: true, maxBytes: 2048, allowEmpty: false)!,
                auth: try web.string("auth", required: true, maxBytes: 256, allowEmpty: false)!,
                p256dh: try web.string("p256dh", required: true, maxBytes: 256, allowEmpty: false)!,
                applicationPubKey: try web.string("applicationPubKey", maxBytes: 256),
                origin: try web.text("origin", maxBytes: 256))
            // The rules an import's subscriptions meet too (``WebPush/refusal``).
            if let (field, reason) = subscription.refusal { throw APIError.invalid("web.\(field): \(reason)") }
            return ClientRegistration(platform: .web, sdkVersion: sdkVersion, web: subscription)
        }
        if let ios = try body.object("ios") {
            let apns = try APNsDevice(
                token: try ios.string("apns_token", required: true, maxBytes: 200, allowEmpty: false)!,
                environment: try ios.string("apns_environment", maxBytes: 16) ?? APNsEnvironment.production.rawValue,
                tokenField: "ios.apns_token", environmentField: "ios.apns_environment")
            return ClientRegistration(
                platform: .ios, apns: apns, bundleID: try ios.text("bundle_id", maxBytes: 255),
                appVersion: try ios.text("app_version", maxBytes: 64), sdkVersion: sdkVersion)
        }
        let android = try body.object("android")!
        return ClientRegistration(
            platform: .android, bundleID: try android.text("package_name", maxBytes: 255),
            appVersion: try android.text("app_version", maxBytes: 64), sdkVersion: sdkVersion)
    }

    static func json(_ r: Registration, project: Project) -> JSONValue {
        var members: [(String, JSONValue)] = [
            ("name", .string("projects/\(project.id)/registrations/\(r.fid)")), ("token", .string(r.token)),
            ("fid", .string(r.fid)),
            ("platform", .string(r.platform.rawValue)), ("state", .string(r.state.rawValue)),
            ("refreshTime", .string(Timestamp.rfc3339(r.refreshedAt))),
        ]
        if let web = r.web {
            members.append(
                (
                    "web",
                    [
                        "endpoint": .string(web.endpoint), "auth": .string(web.auth), "p256dh": .string(web.p256dh),
                        "applicationPubKey": web.applicationPubKey.map { .string($0) } ?? .null,
                    ]
                ))
        }
        if r.platform == .ios {
            members.append(
                (
                    "ios",
                    [
                        "apns_token": r.apnsToken.map { .string($0) } ?? .null,
                        "apns_environment": r.apnsEnvironment.map { .string($0.rawValue) } ?? .null,
                        "bundle_id": r.bundleID.map { .string($0) } ?? .null,
                    ]
                ))
        }
        return .object(members)
    }
}
