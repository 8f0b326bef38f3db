import HTTP
import JSON
import Registry
import Synchronization

/// Health, readiness, metrics, the JWKS of auth-token keys and the OpenAPI document. No authentication.
struct OpsController: Sendable {
    let health: any StoreHealth
    let tokens: TokenIssuer
    let metrics: Metrics
    let jobs: Jobs
    let draining: @Sendable () -> Bool
    let serverGauges: @Sendable () -> [String]

    func register(_ routes: inout Routes) {
        routes.add(.GET, "/healthz", healthz)
        routes.add(.GET, "/readyz", readyz)
        routes.add(.GET, "/metrics", metricsText)
        routes.add(.GET, "/.well-known/jwks.json", jwks)
        routes.add(.GET, "/openapi.yaml", openapi)
    }

    func healthz(_ context: RequestContext) async throws -> HTTPResponse {
        .json(["status": "ok"])
    }

    /// Ready when not draining, the database answers and every migration is applied; 503 otherwise.
    func readyz(_ context: RequestContext) async throws -> HTTPResponse {
        if draining() { return OpsController.notReady("draining") }
        if let reason = await health.unreadiness() { return OpsController.notReady(reason) }
        return .json(["status": "ready"])
    }

    static func notReady(_ reason: String) -> HTTPResponse {
        var response = HTTPResponse.json(["status": "not ready", "reason": .string(reason)], status: 503)
        response.headers.add(name: "retry-after", value: "1")
        return response
    }

    func metricsText(_ context: RequestContext) async throws -> HTTPResponse {
        let connections = health.connections
        var extra = serverGauges()
        extra += PrometheusText.connectionGauges(
            inUse: connections.inUse, idle: connections.idle, waiting: connections.waiting)
        // Read from the database, so every replica (and a `jobs run` process) reports the same; skipped while it is down.
        if let gauges = try? await jobs.gauges() { extra += PrometheusText.registryGauges(gauges) }
        if let skew = try? await jobs.clock.skew() { extra += PrometheusText.clockSkew(skew) }
        return HTTPResponse(
            status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: metrics.render(extra: extra))
    }

    func jwks(_ context: RequestContext) async throws -> HTTPResponse {
        var response = HTTPResponse(status: 200, contentType: "application/json", body: try await tokens.jwks())
        response.headers.add(name: "cache-control", value: "public, max-age=300")
        return response
    }

    func openapi(_ context: RequestContext) async throws -> HTTPResponse {
        HTTPResponse(
            status: 200, headers: ["content-type": "application/yaml; charset=utf-8"], body: OpenAPIDocument.bytes)
    }
}

/// The OpenAPI document compiled into the binary (`openapi.yaml` at the repository root links to it).
enum OpenAPIDocument {
    static let bytes: [UInt8] = PackageResources.openapi_yaml
}
