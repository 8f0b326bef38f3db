import HTTP
import Registry

/// Cross-origin access for the routes browsers call: the web SDKs' installations, registrations and client topic
/// verbs (and the installation's own consent). Their calls carry `Content-Type: application/json` and custom
/// headers, so every one is preceded by a preflight. Origins are per app (`app create --web-origin`, default any
/// origin, since API keys are public as Firebase's are). Server-key routes, and any request made with a server
/// credential, get no cross-origin access at all.
struct CORS: Sendable {
    let catalog: Catalog
    let installations: InstallationService

    /// The request headers the Firebase web SDKs send (and a few a browser or proxy adds).
    static let allowedHeaders = [
        "accept", "authorization", "cache-control", "content-encoding", "content-type", "x-client-data",
        "x-firebase-client", "x-firebase-client-log-type", "x-firebase-gmpid", "x-goog-api-key",
        "x-goog-firebase-installations-auth", "x-goog-user-project", "x-request-id",
    ]
    /// How long a browser may cache a preflight answer.
    static let maxAgeSeconds = 3600

    /// The methods of `template` that browsers may call (``Route/browser``).
    static func browserMethods(template: String, router: Router<Route>) -> [String] {
        router.handlersInOrder.filter { $0.browser && $0.template == template }.map(\.method)
    }

    /// Whether `origin` may call for every group of `apps` the request names (its API key's apps, its installation's
    /// app), or, when it names none, for any app of the project. Apps that share a key share its restriction: the
    /// origins of those that have a list (an app without one, a debug build, opens no key another app restricted).
    func allows(origin: String, project: String?, apps: [[App]]?) async -> Bool {
        if let apps {
            return apps.allSatisfy { group in
                let restricting = group.filter { !$0.webOrigins.isEmpty }
                return restricting.isEmpty || restricting.contains { $0.allows(origin: origin) }
            }
        }
        guard let project, let found = try? await catalog.project(project),
            let apps = try? await catalog.apps(projectID: found.id)
        else { return true }  // nothing to protect: the request will fail on its own, readably
        return apps.isEmpty || apps.contains { $0.allows(origin: origin) }
    }

    /// Answers a preflight for a browser route; nil when the request is no preflight of one (it is then routed as
    /// usual, and an `OPTIONS` elsewhere answers 405 with no `Access-Control-*`).
    func preflight(_ request: HTTPRequest, router: Router<Route>) async -> HTTPResponse? {
        guard request.method == HTTPMethod.OPTIONS.rawValue, let origin = request.headers["origin"],
            let requested = request.headers["access-control-request-method"],
            case let .found(route, parameters, template) = router.match(method: requested, path: request.path),
            route.browser, route.method == requested  // not a HEAD answered by a browser GET route
        else { return nil }
        guard await allows(origin: origin, project: parameters["project"], apps: nil) else {
            return APIError.permissionDenied("origin \(origin.prefix(100)) may not call this service").response
        }
        var response = HTTPResponse(status: 204)
        response.headers.add(name: "access-control-allow-origin", value: origin)
        response.headers.add(
            name: "access-control-allow-methods",
            value: (CORS.browserMethods(template: template, router: router) + ["OPTIONS"]).joined(separator: ", "))
        response.headers.add(name: "access-control-allow-headers", value: CORS.allowedHeaders.joined(separator: ", "))
        response.headers.add(name: "access-control-max-age", value: String(CORS.maxAgeSeconds))
        response.headers.add(
            name: "vary", value: "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
        return response
    }

    /// Lets the calling page read the answer of a browser route, when its origin may call for the request's app.
    func decorate(_ response: inout HTTPResponse, request: HTTPRequest, parameters: [String: String]) async {
        guard let origin = request.headers["origin"] else { return }
        response.headers.add(name: "vary", value: "Origin")
        // A server credential is never to be used from a page.
        if let authorization = request.headers["authorization"], authorization.dropping(caseInsensitivePrefix: "bearer ") != nil {
            return
        }
        guard await allows(origin: origin, project: parameters["project"], apps: await apps(of: request, parameters: parameters)) else { return }
        response.headers.add(name: "access-control-allow-origin", value: origin)
        response.headers.add(name: "access-control-expose-headers", value: "x-request-id, retry-after")
    }

    /// The apps a browser request speaks for, each group a restriction the origin must pass: its API key's apps, and
    /// the apps that share a key with the app of the installation it acts as (its auth token's, or the `{fid}`'s of a
    /// refresh-token call); nil when it names none. A key of one app does not open another app's installation: every
    /// group must allow the origin. The installation's group is its app's key's, as a create's was: a site deployed
    /// with a sibling app's config (apps that share a key) goes on refreshing what it created.
    private func apps(of request: HTTPRequest, parameters: [String: String]) async -> [[App]]? {
        var groups: [[App]] = []
        if let key = Authenticator.apiKey(request), let apps = try? await catalog.apps(apiKey: key), !apps.isEmpty {
            groups.append(apps)
        }
        if let raw = request.headers["x-goog-firebase-installations-auth"],
            let claims = try? await installations.tokens.verify(Authenticator.installationAuthToken(raw)),
            let app = try? await catalog.app(id: claims.appID)
        {
            groups.append(await keyGroup(of: app))
        }
        if let authorization = request.headers["authorization"], authorization.hasPrefix("FIS_v2 "),
            let fid = parameters["fid"], let projectID = parameters["project"],
            let project = try? await catalog.project(projectID),
            let installation = try? await installations.find(project: project, fid: fid),
            let app = try? await catalog.app(id: installation.appID)
        {
            groups.append(await keyGroup(of: app))
        }
        return groups.isEmpty ? nil : groups
    }

    /// The apps that share `app`'s API key (itself among them).
    private func keyGroup(of app: App) async -> [App] {
        guard let apps = try? await catalog.apps(apiKey: app.apiKey), apps.contains(where: { $0.id == app.id }) else {
            return [app]
        }
        return apps
    }
}
