import HTTP
import Registry

/// A credential a route accepts: the route table lists them per route (``Responder/table``), and `openapi.yaml`
/// names each operation's (a test holds the two together).
public enum Credential: String, Sendable, CaseIterable {
    /// No credential (health, the OpenAPI document, the token endpoint, a device's first check-in).
    case anyone
    /// The API key of an app of the path's project (`x-goog-api-key` or `?key=`).
    case apiKey
    /// `Authorization: FIS_v2 <refresh token>` of the path's installation; an API key, when sent, must be the
    /// project's.
    case refreshToken
    /// `x-goog-firebase-installations-auth: [FIS ]<auth token>` of an installation of the path's project; an API key,
    /// when sent, must be the project's.
    case installationToken
    /// `Authorization: Bearer <server key or service-account access token>` of the path's project.
    case serverKey
    /// A server credential of any project (also as `Authorization: key=<server key>`): the IID API's paths name no
    /// project, the credential does.
    case serverKeyOfAnyProject
    /// `Registry-Signature`, made with a secret of the path's linked service for what the request does.
    case registrySignature
    /// `Authorization: AidLogin <android_id>:<security_token>` of a device check-in.
    case aidLogin
    /// `Authorization: Bearer <METRICS_TOKEN>`, when the service has one.
    case metricsToken

    /// The security scheme `openapi.yaml` calls it by; nil for ``anyone`` (`security: []`).
    public var openAPIScheme: String? {
        switch self {
        case .anyone: return nil
        case .apiKey: return "apiKey"
        case .refreshToken: return "refreshToken"
        case .installationToken: return "installationToken"
        case .serverKey, .serverKeyOfAnyProject: return "serverKey"
        case .registrySignature: return "registrySignature"
        case .aidLogin: return "aidLogin"
        case .metricsToken: return "metricsToken"
        }
    }
}

/// Who may call a route, declared where the route is registered (``Routes/add(_:_:_:browser:errors:audit:admit:_:)``).
/// The pipeline resolves it before the handler runs, and the handler receives what it resolved to (`Caller`): a
/// handler cannot be written without one, nor run when it is refused.
public struct Principal<Caller: Sendable>: Sendable {
    /// The credentials that can satisfy it, in the order they are tried.
    public let credentials: [Credential]
    let resolve: @Sendable (Authenticator, RequestContext) async throws -> Caller

    init(
        _ credentials: [Credential], _ resolve: @escaping @Sendable (Authenticator, RequestContext) async throws -> Caller
    ) {
        self.credentials = credentials
        self.resolve = resolve
    }
}

/// A caller that works for one project: the connections its request holds count against that project's share of the
/// pool (``Tenant``), set once the caller is resolved (``Routes``).
protocol ProjectCaller: Sendable {
    /// The project, or nil when the caller belongs to none yet.
    var tenant: String? { get }
}

/// A caller that showed no credential.
public struct Anyone: Sendable {}

/// An app of the path's project, by the API key it sent: every app that holds the key (Firebase's keys are one a
/// platform, shipped by each app of it).
public struct AppCaller: ProjectCaller {
    public let project: Project
    public let apiKey: String
    /// The key's apps, in app ID order (never empty).
    public let apps: [App]
}

/// An installation of the path's project, by its refresh token or auth token.
public struct InstallationCaller: ProjectCaller {
    public let project: Project
    public let installation: Installation
}

/// An installation of the path's project by its auth token, or the FID of a valid token whose installation was
/// deleted (``Principal/installationTokenOrGone``).
public enum InstallationOrGone: ProjectCaller {
    case live(InstallationCaller)
    case gone(project: Project, fid: String)

    var tenant: String? {
        switch self {
        case let .live(caller): caller.project.id
        case let .gone(project, _): project.id
        }
    }
}

/// An app backend, by a server credential of `project`; `actor` names the credential (``AuditedCaller``).
public struct ServerCaller: ProjectCaller {
    public let project: Project
    public let actor: String
}

/// A linked service of the path's project, by its signature.
public struct ServiceCaller: ProjectCaller {
    public let project: Project
    public let signed: SignedByService
}

/// A device, by the check-in it was given, and the installation whose auth token it sent along, if any.
public struct CheckinCaller: ProjectCaller {
    public let checkin: StoredCheckin
    public let installation: InstallationCaller?

    var tenant: String? { installation?.project.id ?? checkin.projectID }
}

/// One of two principals, whichever the request chose (``Principal/either(_:when:otherwise:)``).
public enum OneOf<First: Sendable, Second: Sendable>: ProjectCaller {
    case first(First)
    case second(Second)

    var tenant: String? {
        switch self {
        case let .first(caller): (caller as? any ProjectCaller)?.tenant
        case let .second(caller): (caller as? any ProjectCaller)?.tenant
        }
    }
}

extension AppCaller { var tenant: String? { project.id } }
extension InstallationCaller { var tenant: String? { project.id } }
extension ServerCaller { var tenant: String? { project.id } }
extension ServiceCaller { var tenant: String? { project.id } }

extension Principal where Caller == Anyone {
    /// No credential needed.
    public static var anyone: Principal { Principal([.anyone]) { _, _ in Anyone() } }
    /// The metrics token as a bearer token, when the service has one; anyone otherwise.
    public static var metricsToken: Principal {
        Principal([.metricsToken]) { auth, context in
            try auth.metrics(context)
            return Anyone()
        }
    }
}

extension Principal where Caller == AppCaller {
    /// An API key of an app of the path's project.
    public static var apiKey: Principal {
        Principal([.apiKey]) { auth, context in
            let project = try await auth.project(context)
            return try await auth.app(context, project: project)
        }
    }
}

extension Principal where Caller == InstallationCaller {
    /// The refresh token of the installation `{fid}` names.
    public static var refreshToken: Principal {
        Principal([.refreshToken]) { auth, context in
            let project = try await auth.project(context)
            try await auth.optionalApp(context, project: project)
            let token = try auth.refreshToken(context)
            let installation = try await auth.installations.authenticate(
                project: project, fid: context.parameter("fid"), refreshToken: token)
            return InstallationCaller(project: project, installation: installation)
        }
    }

    /// An installation's auth token; with `owning`, the installation must be the one that path parameter names
    /// (403 otherwise). With `afterRotation`, a path that names an FID no installation has any more is the token's
    /// installation too: iOS builds the path from the FID it read before the token refresh that found the
    /// installation deleted and made a new one (`FIRMessagingTopicOperation`), and a 403 there drops the operation.
    public static func installationToken(owning parameter: String? = nil, afterRotation: Bool = false) -> Principal {
        Principal([.installationToken]) { auth, context in
            let project = try await auth.project(context)
            try await auth.optionalApp(context, project: project)
            let installation = try await auth.installation(context, project: project)
            if let parameter, case let named = context.parameter(parameter), named != installation.fid {
                guard afterRotation, Identifiers.isValidFID(named),
                    try await auth.installations.find(project: project, fid: named) == nil
                else { throw APIError.permissionDenied("the auth token belongs to another installation") }
            }
            return InstallationCaller(project: project, installation: installation)
        }
    }
}

extension Principal where Caller == InstallationOrGone {
    /// An installation's auth token, valid though its installation may have been deleted since: for a clean-up the
    /// client makes with the token it still holds, which finds nothing left rather than a 401 that stops the SDK
    /// clearing its own state.
    public static var installationTokenOrGone: Principal {
        Principal([.installationToken]) { auth, context in
            let project = try await auth.project(context)
            try await auth.optionalApp(context, project: project)
            let (fid, installation) = try await auth.installationOrGone(context, project: project)
            guard let installation else { return .gone(project: project, fid: fid) }
            return .live(InstallationCaller(project: project, installation: installation))
        }
    }
}

extension Principal where Caller == ServerCaller {
    /// A server key or service-account access token of the path's project.
    public static var serverKey: Principal {
        Principal([.serverKey]) { auth, context in
            let project = try await auth.project(context)
            return ServerCaller(project: project, actor: try await auth.server(context, project: project))
        }
    }

    /// A server credential of any project, which it names (the IID API).
    public static var serverKeyOfAnyProject: Principal {
        Principal([.serverKeyOfAnyProject]) { auth, context in
            guard let (project, actor) = try await auth.serverKeyProject(context) else {
                throw APIError.unauthenticated("a server key is required (Authorization: Bearer <server key>)")
            }
            return ServerCaller(project: project, actor: actor)
        }
    }
}

extension Principal where Caller == ServiceCaller {
    /// A signature of the linked service `{name}` of the path's project, for what `purpose` makes of the request (it
    /// may read the body; it runs only when the request carries a signature at all).
    public static func registrySignature(
        for purpose: @escaping @Sendable (RequestContext, _ project: Project) throws -> WebhookSignature.Purpose
    ) -> Principal {
        Principal([.registrySignature]) { auth, context in
            try await auth.service(context, purpose: purpose)
        }
    }
}

extension Principal where Caller == CheckinCaller {
    /// A check-in's `AidLogin`.
    public static var aidLogin: Principal {
        Principal([.aidLogin]) { auth, context in try await auth.checkin(context, withInstallation: false) }
    }

    /// A check-in's `AidLogin`, with the installation auth token the device sent along (header, or the form's
    /// `Goog-Firebase-Installations-Auth`), when it sent one: both must be valid.
    public static var aidLoginWithInstallation: Principal {
        Principal([.aidLogin]) { auth, context in try await auth.checkin(context, withInstallation: true) }
    }
}

extension Principal {
    /// `first` when the request `chooses` it (by the credential it carries), `second` otherwise.
    public static func either<A, B>(
        _ first: Principal<A>, when chooses: @escaping @Sendable (RequestContext) -> Bool,
        otherwise second: Principal<B>
    ) -> Principal<OneOf<A, B>> where Caller == OneOf<A, B> {
        Principal<OneOf<A, B>>(first.credentials + second.credentials) { auth, context in
            chooses(context)
                ? .first(try await first.resolve(auth, context)) : .second(try await second.resolve(auth, context))
        }
    }
}

extension RequestContext {
    /// Whether the request carries a bearer credential (a server key or access token): routes that also take a
    /// client's credential choose by this.
    public var hasBearer: Bool { Authenticator.serverKey(self) != nil }

    /// Whether the request carries a `Registry-Signature`.
    public var hasSignature: Bool { header("registry-signature") != nil }
}
