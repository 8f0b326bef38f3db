import HTTP
import Registry

/// Who is calling, for each of the four principals (ARCHITECTURE.md): an app (API key), an installation with its
/// refresh token (`FIS_v2`), an installation with its auth token (`x-goog-firebase-installations-auth`), or an
/// app backend (`Authorization: Bearer <server key>`). Every check also binds the caller to the path's project.
public struct Authenticator: Sendable {
    let catalog: Catalog
    let installations: InstallationService

    /// The project named in the path, by ID or number.
    public func project(_ context: RequestContext) async throws -> Project {
        let reference = context.parameter("project")
        guard let project = try await catalog.project(reference) else {
            throw APIError.notFound("project \(reference.prefix(64)) not found")
        }
        return project
    }

    /// The app whose API key came with the request (`x-goog-api-key` or `?key=`); it must belong to `project`.
    public func app(_ context: RequestContext, project: Project) async throws -> App {
        guard let key = context.header("x-goog-api-key") ?? context.request.query("key"), !key.isEmpty else {
            throw APIError.permissionDenied("an API key is required (x-goog-api-key)")
        }
        guard let app = try await catalog.app(apiKey: key) else {
            throw APIError.invalid("API key not valid. Please pass a valid API key.")
        }
        guard app.projectID == project.id else {
            throw APIError.permissionDenied("the API key does not belong to project \(project.id)")
        }
        return app
    }

    /// Checks an API key when one is sent (the refresh or auth token is then the real credential).
    public func optionalApp(_ context: RequestContext, project: Project) async throws {
        if let key = context.header("x-goog-api-key") ?? context.request.query("key"), !key.isEmpty {
            _ = try await app(context, project: project)
        }
    }

    /// True when the request carries a server key (`Authorization: Bearer …`).
    public func hasServerKey(_ context: RequestContext) -> Bool {
        context.header("authorization").map { $0.lowercased().hasPrefix("bearer ") } ?? false
    }

    /// Requires a server key of `project`.
    public func server(_ context: RequestContext, project: Project) async throws {
        guard let authorization = context.header("authorization"), authorization.lowercased().hasPrefix("bearer ")
        else {
            throw APIError.unauthenticated("a server key is required (Authorization: Bearer <server key>)")
        }
        let key = String(authorization.dropFirst(7)).trimmingCharacters(in: " ")
        guard let owner = try await catalog.projectID(serverKey: key) else {
            throw APIError.unauthenticated("the server key is not valid")
        }
        guard owner == project.id else {
            throw APIError.permissionDenied("the server key does not belong to project \(project.id)")
        }
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
        guard var token = context.header("x-goog-firebase-installations-auth"), !token.isEmpty else {
            throw APIError.unauthenticated(
                "an installation auth token is required (x-goog-firebase-installations-auth)")
        }
        if token.hasPrefix("FIS ") { token = String(token.dropFirst(4)) }
        return try await installations.authenticate(project: project, authToken: token)
    }
}
