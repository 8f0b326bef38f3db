import Crypto
import HTTP
import Registry

/// Who is calling, for each of the principals (docs/architecture.md): an app (API key), an installation with its
/// refresh token (`FIS_v2`), an installation with its auth token (`x-goog-firebase-installations-auth`), or an
/// app backend (`Authorization: Bearer <server key>`, or the access token a service account got at `POST /token`).
/// Every check also binds the caller to the path's project. Routes do not call it: they declare a ``Principal``, which
/// the pipeline resolves through it.
public struct Authenticator: Sendable {
    let catalog: Catalog
    let installations: InstallationService
    let serviceAccounts: ServiceAccountService
    let deletions: DeletionService
    let checkins: CheckinService
    /// When set, `/metrics` requires it as a bearer token.
    let metricsToken: String?

    /// The project named in the path, by ID or number.
    ///
    /// An unknown one is not refused here: the request goes on against a project that no credential belongs to
    /// (``Project`` with the reference as its ID and no number), so every caller gets exactly what a known project
    /// answers a stranger with the same credentials: 403 for another project's valid API key or server key, 400 for
    /// an API key that is not one, 401 for a credential that is not valid. Whether a project exists is never told
    /// apart. (An SDK sends its API key first, so a misconfigured one gets 403 or 400, never the 404 that makes it
    /// discard its FID.) A reference that is neither a project ID nor a number names no project either: it is
    /// answered the same way, and none of its bytes reach a store (the stand-in's ID is empty).
    public func project(_ context: RequestContext) async throws -> Project {
        let reference = context.parameter("project")
        guard Identifiers.isValidProjectID(reference) || Identifiers.isProjectNumber(reference) else {
            return Project(id: "", number: -1)
        }
        return try await catalog.project(reference) ?? Project(id: reference, number: -1)
    }

    /// The API key that came with the request (`x-goog-api-key` or `?key=`) and the apps that hold it; they must be
    /// of `project`.
    public func app(_ context: RequestContext, project: Project) async throws -> AppCaller {
        guard let key = Authenticator.apiKey(context.request) else {
            throw APIError.permissionDenied("an API key is required (x-goog-api-key)")
        }
        let apps = try await catalog.apps(apiKey: key)
        guard let first = apps.first else { throw APIError.invalid("API key not valid. Please pass a valid API key.") }
        guard first.projectID == project.id else {
            throw APIError.permissionDenied("the API key does not belong to this project")
        }
        return AppCaller(project: project, apiKey: key, apps: apps)
    }

    /// Checks an API key when one is sent (the refresh or auth token is then the real credential).
    public func optionalApp(_ context: RequestContext, project: Project) async throws {
        if Authenticator.apiKey(context.request) != nil { _ = try await app(context, project: project) }
    }

    /// The API key a request carries (`x-goog-api-key`, or `?key=`), nil when none or empty.
    static func apiKey(_ request: HTTPRequest) -> String? {
        guard let key = request.headers["x-goog-api-key"] ?? request.query("key"), !key.isEmpty else { return nil }
        return key
    }

    /// An installation auth token as sent in `x-goog-firebase-installations-auth`, with or without `FIS `.
    static func installationAuthToken(_ raw: String) -> String {
        raw.hasPrefix("FIS ") ? String(raw.dropFirst(4)) : raw
    }

    /// The key of `Authorization: Bearer <key>`, or of the legacy `Authorization: key=<key>` the IID API accepts.
    static func serverKey(_ context: RequestContext, allowLegacy: Bool = false) -> String? {
        guard let authorization = context.header("authorization") else { return nil }
        if let key = authorization.dropping(caseInsensitivePrefix: "bearer ") { return key.trimmingCharacters(in: " ") }
        if allowLegacy, let key = authorization.dropping(caseInsensitivePrefix: "key=") {
            return key.trimmingCharacters(in: " ")
        }
        return nil
    }

    /// The project a server credential (server key or service-account access token) belongs to, and who it is, or
    /// nil.
    func credential(_ credential: String) async throws -> (projectID: String, actor: String)? {
        if let identity = try await serviceAccounts.identity(ofAccessToken: credential) {
            return (identity.projectID, "serviceAccount:" + identity.keyID)
        }
        guard let (project, keyHash) = try await catalog.serverKeyOwner(credential) else { return nil }
        return (project, Authenticator.actor(serverKeyHash: keyHash))
    }

    /// A server key as the audit log names it: a fingerprint of its hash (the hash is what the store keeps; a
    /// fingerprint of 12 hex digits identifies the key among a project's few and reveals nothing of it).
    public static func actor(serverKey: String) -> String { actor(serverKeyHash: SHA256.hash(serverKey)) }

    static func actor(serverKeyHash: [UInt8]) -> String { "serverKey:" + Hex.encode(serverKeyHash.prefix(6)) }

    /// The project whose server credential came with the request (IID routes name no project), and who it is, or nil.
    public func serverKeyProject(_ context: RequestContext) async throws -> (Project, actor: String)? {
        guard let key = Authenticator.serverKey(context, allowLegacy: true),
            let (projectID, actor) = try await credential(key),
            let project = try await catalog.project(projectID)
        else { return nil }
        return (project, actor)
    }

    /// Requires a server key of `project`; who it is.
    public func server(_ context: RequestContext, project: Project) async throws -> String {
        guard let key = Authenticator.serverKey(context) else {
            throw APIError.unauthenticated("a server key is required (Authorization: Bearer <server key>)")
        }
        guard let (owner, actor) = try await credential(key) else {
            throw APIError.unauthenticated("the server key is not valid")
        }
        guard owner == project.id else {
            throw APIError.permissionDenied("the server key does not belong to this project")
        }
        return actor
    }

    /// The refresh token of `Authorization: FIS_v2 <token>`.
    public func refreshToken(_ context: RequestContext) throws -> String {
        guard let authorization = context.header("authorization") else {
            throw APIError.unauthenticated("Authorization: FIS_v2 <refresh token> is required")
        }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0] == "FIS_v2", !parts[1].isEmpty, parts[1].utf8.count <= 512 else {
            throw APIError.unauthenticated("Authorization must be FIS_v2 <refresh token>")
        }
        return String(parts[1])
    }

    /// The installation whose auth token came in `x-goog-firebase-installations-auth`, with or without `FIS `.
    public func installation(_ context: RequestContext, project: Project) async throws -> Installation {
        try await installations.authenticate(project: project, authToken: installationAuthToken(context))
    }

    /// The installation a valid auth token speaks for, or (nil) its FID when it was deleted.
    func installationOrGone(_ context: RequestContext, project: Project) async throws -> (String, Installation?) {
        try await installations.authenticateOrGone(project: project, authToken: installationAuthToken(context))
    }

    private func installationAuthToken(_ context: RequestContext) throws -> String {
        guard let raw = context.header("x-goog-firebase-installations-auth"), !raw.isEmpty else {
            throw APIError.unauthenticated(
                "an installation auth token is required (x-goog-firebase-installations-auth)")
        }
        return Authenticator.installationAuthToken(raw)
    }

    /// Requires the metrics token as a bearer token, when the service has one.
    func metrics(_ context: RequestContext) throws {
        guard let metricsToken else { return }
        let given = Authenticator.serverKey(context) ?? ""
        guard ConstantTime.equals(SHA256.hash(given), SHA256.hash(metricsToken)) else {
            var refused = APIError.unauthenticated("Authorization: Bearer <METRICS_TOKEN> is required")
            refused.headers.add(name: "www-authenticate", value: "Bearer")
            throw refused
        }
    }

    /// The linked service `{name}` of the path's project, by a `Registry-Signature` for `purpose` (which may read the
    /// body, and is made only once a signature is known to be there).
    func service(
        _ context: RequestContext,
        purpose: (RequestContext, Project) throws -> WebhookSignature.Purpose
    ) async throws -> ServiceCaller {
        let project = try await project(context)
        let name = context.parameter("name")
        guard let signature = context.header("registry-signature") else {
            throw APIError.unauthenticated(
                "this request must carry Registry-Signature, made with the linked service's own secret")
        }
        let signed = try await deletions.authenticate(
            projectID: project.id, service: name, signature: signature, body: context.request.body,
            for: try purpose(context, project))
        return ServiceCaller(project: project, signed: signed)
    }

    /// The check-in of `Authorization: AidLogin …`, and (`withInstallation`) the installation of the auth token that
    /// came with it. A check-in the service does not know is enrolled when, and only when, a valid installation auth
    /// token of the project comes with it (a device moved from Google gets its token on the first register that carries
    /// a token of this service: Google's own is refused until the SDK renews it, docs/clients.md); on its own it is
    /// refused.
    func checkin(_ context: RequestContext, withInstallation: Bool) async throws -> CheckinCaller {
        let identity = try await checkins.identify(aidLogin: context.header("authorization"))
        let installation = withInstallation ? try await checkinInstallation(context) : nil
        switch identity {
        case let .known(checkin):
            return CheckinCaller(checkin: checkin, installation: installation)
        case let .unknown(device):
            guard let installation else { throw RegistryError(.unauthenticated, "unknown check-in credentials") }
            let enrolled = try await checkins.enroll(device, for: installation.installation)
            return CheckinCaller(checkin: enrolled, installation: installation)
        }
    }

    /// The installation of the auth token a register-API request carries (header, or the form's
    /// `Goog-Firebase-Installations-Auth`); nil when it carries none.
    private func checkinInstallation(_ context: RequestContext) async throws -> InstallationCaller? {
        guard
            let raw = context.header("x-goog-firebase-installations-auth")
                ?? CheckinController.Form(context)?("Goog-Firebase-Installations-Auth")
        else { return nil }
        // Verified once: its claims name the project, whose installation they then speak for.
        let claims = try await installations.tokens.verify(Authenticator.installationAuthToken(raw))
        guard let project = try await catalog.project(String(claims.projectNumber)) else {
            throw RegistryError(.unauthenticated, "the auth token's project is unknown")
        }
        let installation = try await installations.installation(project: project, claims: claims)
        return InstallationCaller(project: project, installation: installation)
    }
}
