import Foundation
import HTTP
import JSON
import Registry

/// The register API that clients reach before (or instead of) the FCM registration API, each at Google's own path:
/// device check-in (`POST /checkin`, JSON from iOS, protobuf from GCM clients), token registration and deletion
/// (`POST /register` from FirebaseMessaging on iOS, `POST /c2dm/register3` in its GCM form), and topic
/// (un)subscription (`POST /iid/register`). Requests are form-encoded and authorized with
/// `AidLogin <android_id>:<security_token>`; answers are plain-text `key=value` lines, failures `Error=<CODE>`.
/// Registrations made here are the installation's registration, under its consent, like every other.
struct CheckinController: Sendable {
    let catalog: Catalog
    let checkins: CheckinService
    let installations: InstallationService
    let registrations: RegistrationService
    let topics: TopicService
    /// Unauthenticated writes (new check-ins, GCM-form registrations) per client address.
    let perAddress: RateLimiter
    let trustedProxyHops: Int

    func register(_ routes: inout Routes) {
        // A new device has no credential; a returning one proves itself with the identity in its body.
        routes.add(.POST, "/checkin", .anyone, admit: { limit($0) }, checkIn)
        // The GCM form (no installation auth token) writes for a check-in alone: limited per address before anything
        // is looked up.
        let gcmForm: @Sendable (RequestContext) -> HTTPResponse? = { context in
            context.header("x-goog-firebase-installations-auth") == nil
                && Form(context)?("Goog-Firebase-Installations-Auth") == nil ? limit(context) : nil
        }
        routes.add(.POST, "/register", .aidLoginWithInstallation, errors: .registerText, admit: gcmForm, registerToken)
        routes.add(.POST, "/c2dm/register3", .aidLoginWithInstallation, errors: .registerText, admit: gcmForm, registerToken)
        routes.add(.POST, "/iid/register", .aidLogin, errors: .registerText, topic)
    }

    /// A register-API answer: `key=value`, exactly as Google's (`token=<id>`, `Error=<CODE>`), with no line end after
    /// it: the iOS SDK splits lines, but the Python firebase-messaging client keeps the rest of the body in the value.
    static func text(_ status: Int, _ body: String) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "text/plain; charset=utf-8", body: body)
    }

    /// Any failure as Google's plain-text `Error=` answer; never a 5xx for a bad request or bad credentials.
    static func failure(_ error: any Error) -> HTTPResponse {
        guard let error = error as? RegistryError else {
            if let api = error as? APIError, api.status < 500 { return text(api.status, "Error=INVALID_PARAMETERS") }
            return text(500, "Error=INTERNAL_SERVER_ERROR")
        }
        switch error.kind {
        case .unauthenticated, .permissionDenied: return text(401, "Error=AUTHENTICATION_FAILED")
        case .invalidArgument: return text(400, "Error=INVALID_PARAMETERS")
        case .failedPrecondition: return text(400, "Error=FAILED_PRECONDITION")
        case .notFound: return text(404, "Error=RST")
        case .resourceExhausted: return text(429, "Error=RESOURCE_EXHAUSTED")
        case .unavailable, .aborted:
            var response = text(503, "Error=SERVICE_NOT_AVAILABLE")
            response.headers.add(name: "retry-after", value: "1")
            return response
        default: return text(500, "Error=INTERNAL_SERVER_ERROR")
        }
    }

    /// 429 with `Retry-After` (and Google's `Error=` body) when the client's address is over its rate.
    private func limit(_ context: RequestContext) -> HTTPResponse? {
        let address = ClientAddress.limiterKey(of: context.request, trustedProxyHops: trustedProxyHops)
        guard let wait = perAddress.acquire(address) else { return nil }
        var response = Self.text(429, "Error=RESOURCE_EXHAUSTED")
        response.headers.add(name: "retry-after", value: String(wait))
        return response
    }

    // MARK: - Check-in

    /// `POST /checkin`: JSON (iOS) or `application/x-protobuf` (GCM clients), answered in the same form.
    func checkIn(_ context: RequestContext, _: Anyone) async throws -> HTTPResponse {
        let protobuf = context.header("content-type")?.lowercased().hasPrefix("application/x-protobuf") ?? false
        var androidID: UInt64?
        var securityToken: UInt64?
        if protobuf {
            guard let fields = try? Protobuf.fields(context.request.body) else {
                return Self.text(400, "Error=INVALID_PARAMETERS")
            }
            for (number, value) in fields {
                if number == 2, case let .varint(id) = value { androidID = id }
                if number == 13, case let .fixed64(token) = value { securityToken = token }
            }
        } else {
            let body = try context.jsonObject(allowEmpty: true)
            if let checkin = body["checkin"], checkin.objectValue == nil {
                throw APIError.invalid("checkin: must be an object, not \(checkin.typeName)")
            }
            for field in ["id", "security_token"] where body[field] != nil && Self.unsigned(body[field]) == nil {
                throw APIError.invalid("\(field): must be a whole number from 0 to 2^63-1")
            }
            androidID = Self.unsigned(body["id"]).flatMap { $0 == 0 ? nil : $0 }
            securityToken = Self.unsigned(body["security_token"]).flatMap { $0 == 0 ? nil : $0 }
        }
        let checkin: DeviceCheckin
        do {
            checkin = try await checkins.checkIn(androidID: androidID, securityToken: securityToken)
        } catch {
            return Self.failure(error)
        }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        if protobuf {
            var out = Protobuf.Writer()
            out.varint(1, 1)  // stats_ok
            out.varint(3, UInt64(now))  // time_msec
            out.string(4, "")  // digest
            out.fixed64(7, checkin.androidID)
            out.fixed64(8, checkin.securityToken)
            out.string(11, "token-registry")  // version_info
            return HTTPResponse(status: 200, headers: ["content-type": "application/x-protobuf"], body: out.bytes)
        }
        return .json([
            "stats_ok": true, "time_msec": .int(now), "digest": "", "android_id": .int(Int64(bitPattern: checkin.androidID)),
            "security_token": .int(Int64(bitPattern: checkin.securityToken)), "version_info": "token-registry",
            "device_data_version_info": "token-registry", "setting": [],
        ])
    }

    /// A check-in identity as a whole number (`12`, `12.0`) or a decimal string (JSON clients send either), from 0 to
    /// 2^63-1; nil for anything else.
    static func unsigned(_ value: JSONValue?) -> UInt64? {
        if let n = value?.int64Value { return n >= 0 ? UInt64(n) : nil }
        if case let .number(text)? = value, let double = Double(text),
            let whole = ClientNumbers.integer(double, in: 0...Int64.max)
        {
            return UInt64(whole)
        }
        if let text = value?.stringValue, text.utf8.count <= 19, let n = UInt64(text), n <= UInt64(Int64.max) {
            return n
        }
        return nil
    }

    // MARK: - Register

    /// The request's form fields; the first value of a name wins, and `X-` prefixed names are read as well.
    struct Form {
        let items: [(name: String, value: String)]

        /// The request's form, nil when its body is none (or too large to be one).
        init?(_ context: RequestContext) {
            guard let items = context.request.formItems, items.count <= 64,
                items.allSatisfy({ $0.name.utf8.count <= 64 && $0.value.utf8.count <= 4096 })
            else { return nil }
            self.items = items
        }

        func callAsFunction(_ name: String) -> String? {
            items.first { $0.name == name }?.value ?? items.first { $0.name == "X-" + name }?.value
        }

        var deletes: Bool {
            ["true", "1"].contains(self("delete") ?? "") || self("iid-operation") == "delete"
        }
    }

    static func form(_ context: RequestContext) throws -> Form {
        guard let form = Form(context) else {
            throw RegistryError.invalid("body", "must be a form of at most 64 fields")
        }
        return form
    }

    /// `POST /register` and `POST /c2dm/register3`. With an installation auth token (iOS), the installation's own
    /// registration; without one (the GCM form of web-push receivers), a token per check-in, app and subtype.
    func registerToken(_ context: RequestContext, _ caller: CheckinCaller) async throws -> HTTPResponse {
        let form = try Self.form(context)
        let checkin = caller.checkin
        if let installation = caller.installation {
            return try await registerInstallation(
                checkin: checkin, installation, form: form)
        }
        guard let app = form("app"), let subtype = form("subtype") ?? form("sender"), !app.isEmpty, !subtype.isEmpty
        else { throw RegistryError.invalid("app", "app and X-subtype (or sender) are required") }
        if form.deletes {
            let token = try await checkins.deleteGCMToken(checkin, app: app, subtype: subtype)
            return Self.text(200, "deleted=\(token ?? subtype)")
        }
        return Self.text(200, "token=\(try await checkins.gcmToken(checkin, app: app, subtype: subtype))")
    }

    private func registerInstallation(
        checkin: StoredCheckin, _ caller: InstallationCaller, form: Form
    ) async throws
        -> HTTPResponse
    {
        let (project, installation) = (caller.project, caller.installation)
        if let appid = form("appid"), appid != installation.fid,
            try await installations.find(project: project, fid: appid) != nil
        {
            // iOS reads its FID before it fetches the auth token, and a refresh that found the installation deleted (by
            // the backend, an erasure, the inactivity expiry) makes a new one: the form then names the old FID and
            // the token the new one. The token is the credential, so the request acts for its installation; only an
            // `appid` that names another live installation is refused.
            throw RegistryError.invalid("appid", "must be the FID of the installation auth token")
        }
        if let gmpAppID = form("gmp_app_id"), gmpAppID != installation.appID {
            throw RegistryError.invalid("gmp_app_id", "must be the app of the installation auth token")
        }
        // A check-in bound to another installation of the same app moves here (the device's FID changed).
        var previous: Installation?
        if let bound = checkin.fid, checkin.projectID == project.id, bound != installation.fid {
            previous = try await installations.find(project: project, fid: bound)
        }
        // The SDK names a token by sender (`X-subtype`, or `sender` alone on deletes) and scope; read before the
        // check-in moves, so a request refused for its form moves nothing.
        let sender = form("subtype") ?? form("sender")
        let audience = try TokenAudience.of(
            sender: sender, scope: form("scope"), project: project, deleting: form.deletes)
        let movedFrom = try await checkins.bind(checkin, to: installation, previous: previous)
        if form.deletes, let old = movedFrom, sender == nil {
            // The SDK's fresh-install clean-up: the old check-in, the new installation's token, no sender at all
            // (`deleteData`'s `sender=*` deletes this installation's tokens instead). The old installation's tokens
            // go (the device left them behind), as its own auth token could delete them; the installation itself
            // stays until its inactivity expiry. A check-in moves on an auth token alone (one a backend was shown
            // is enough), so deleting the installation here let whoever held its auth token delete it for good.
            guard let previous else { return Self.text(200, "deleted=\(old)") }
            let deleted = try await registrations.delete(installation: previous, .everything)
            return Self.text(200, "deleted=\(deleted.first ?? old)")
        }
        if form.deletes {
            // Exactly what it names: the installation's own registration, one sender's token, or (`sender=*`, or no
            // sender) all of them.
            let deleted = try await registrations.delete(installation: installation, audience)
            return Self.text(200, "deleted=\(deleted.first ?? installation.fid)")
        }
        if case let .sender(sender, scope) = audience {
            let token = try await registrations.senderToken(installation: installation, sender: sender, scope: scope)
            return Self.text(200, "token=\(token)")
        }
        var apns: APNsDevice?
        if let tuple = form("apns_token") {
            // `p_<hex>` production, `s_<hex>` sandbox (FIRMessagingAPNSTupleStringForTokenAndServerType).
            guard tuple.hasPrefix("p_") || tuple.hasPrefix("s_") else {
                throw RegistryError.invalid("apns_token", "must be p_<hex> or s_<hex>")
            }
            let environment: APNsEnvironment = tuple.hasPrefix("s_") ? .sandbox : .production
            apns = try APNsDevice(
                token: String(tuple.dropFirst(2)), environment: environment.rawValue, tokenField: "apns_token",
                environmentField: "apns_token")
        }
        let platform = try await catalog.app(id: installation.appID)?.platform ?? .ios
        let stored = try await registrations.register(
            installation: installation,
            ClientRegistration(
                platform: apns == nil ? platform : .ios, apns: apns,
                bundleID: form("app").flatMap { Identifiers.isPlainText($0, limit: 255) ? $0 : nil },
                appVersion: form("app_ver").flatMap { Identifiers.isPlainText($0, limit: 64) ? $0 : nil },
                sdkVersion: form("cliv").flatMap { Identifiers.isPlainText($0, limit: 64) ? $0 : nil }))
        return Self.text(200, "token=\(stored.token)")
    }

    // MARK: - Topics

    /// `POST /iid/register`: `sender=<token>&X-gcm.topic=/topics/<t>[&delete=true]`, for the installation the
    /// check-in registered.
    func topic(_ context: RequestContext, _ caller: CheckinCaller) async throws -> HTTPResponse {
        let checkin = caller.checkin
        let form = try Self.form(context)
        guard let token = form("sender"), let raw = form("gcm.topic") ?? form("scope") else {
            throw RegistryError.invalid("sender", "sender and X-gcm.topic are required")
        }
        let topic = try TopicService.name(raw, field: "X-gcm.topic")
        guard let projectID = checkin.projectID, let fid = checkin.fid,
            let project = try await catalog.project(projectID),
            let registration = try await registrations.find(project: project, tokenOrFID: token),
            registration.fid == fid
        else { throw RegistryError(.permissionDenied, "the token is not this check-in's installation's") }
        do {
            if form.deletes {
                _ = try await topics.unsubscribe(project: project, fids: [fid], topic: topic)
            } else {
                _ = try await topics.subscribe(project: project, fid: fid, topic: topic)
            }
        } catch let error as RegistryError where error == TopicService.tooManyTopics {
            return Self.text(400, "Error=TOO_MANY_TOPICS")
        }
        return Self.text(200, "token=\(token)")
    }
}
