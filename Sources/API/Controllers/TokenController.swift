import HTTP
import JSON
import Registry

/// `POST /token`: the OAuth 2.0 token endpoint of service-account credential files (JWT bearer, RFC 7523), so the
/// admin SDKs load their credentials as they do against Google. Answers and errors in OAuth's own shape (RFC 6749
/// §5), not Google's API error shape.
struct TokenController: Sendable {
    let serviceAccounts: ServiceAccountService

    func register(_ routes: inout Routes) {
        // The assertion in the body is the credential: a service account's key signs it (RFC 7523).
        routes.add(.POST, "/token", .anyone, token)
    }

    static func oauthError(_ code: String, _ description: String, status: Int = 400) -> HTTPResponse {
        var response = HTTPResponse.json(
            ["error": .string(code), "error_description": .string(description)], status: status)
        response.headers.add(name: "cache-control", value: "no-store")
        return response
    }

    func token(_ context: RequestContext, _: Anyone) async throws -> HTTPResponse {
        guard let form = context.request.formItems else {
            return Self.oauthError(
                "invalid_request",
                "the body must be application/x-www-form-urlencoded, at most \(HTTPRequest.maxFormItems) fields")
        }
        let grantType = form.first { $0.name == "grant_type" }?.value
        guard grantType == ServiceAccountService.grantType else {
            return Self.oauthError(
                "unsupported_grant_type", "grant_type must be \(ServiceAccountService.grantType)")
        }
        guard let assertion = form.first(where: { $0.name == "assertion" })?.value, !assertion.isEmpty else {
            return Self.oauthError("invalid_request", "assertion is required")
        }
        do {
            let token = try await serviceAccounts.exchange(assertion: assertion)
            var response = HTTPResponse.json([
                "access_token": .string(token.token), "expires_in": .int(Int64(token.expiresIn)),
                "token_type": "Bearer",
            ])
            response.headers.add(name: "cache-control", value: "no-store")
            return response
        } catch let error as RegistryError where error.kind == .unauthenticated {
            return Self.oauthError("invalid_grant", error.message)
        }
    }
}
