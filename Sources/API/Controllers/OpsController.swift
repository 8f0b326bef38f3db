import Crypto
import HTTP
import JSON
import Registry
import Synchronization

/// The gauges read from the database for `/metrics`, kept for a few seconds: scrapes, however frequent and from
/// however many scrapers, cost the database at most one round of aggregate queries per interval. Scrapes that arrive
/// while a round is running wait for it instead of starting their own (a burst of requests to an unprotected
/// `/metrics` costs one round, not one each).
final class GaugeCache: Sendable {
    /// How long a round's answer serves later scrapes, from when the round started.
    let ttl: Duration
    /// The latest round, from when it started; it may still be running.
    private let latest = Mutex<(started: ContinuousClock.Instant, round: Task<[String], Never>)?>(nil)

    init(ttl: Duration = .seconds(5)) { self.ttl = ttl }

    func lines(_ load: @escaping @Sendable () async -> [String]) async -> [String] {
        let round = latest.withLock { latest -> Task<[String], Never> in
            if let latest, ContinuousClock.now - latest.started < ttl { return latest.round }
            let round = Task { await load() }
            latest = (.now, round)
            return round
        }
        return await round.value
    }
}

/// Health, readiness, metrics (with the metrics token, when there is one), the JWKS of auth-token keys and the OpenAPI
/// document.
struct OpsController: Sendable {
    let health: any StoreHealth
    let tokens: TokenIssuer
    let metrics: Metrics
    let jobs: Jobs
    let gauges: GaugeCache
    /// Registrations by freshness: a count over the table, so once every five minutes at most.
    let slowGauges = GaugeCache(ttl: .seconds(300))
    /// The database's answer to readiness, shared for half a second: `/readyz` needs no credential, so each call would
    /// otherwise take a pool connection that any client can ask for.
    let readiness = SharedRounds<String?>(ttl: .milliseconds(500))
    let draining: @Sendable () -> Bool
    let serverGauges: @Sendable () -> [String]

    func register(_ routes: inout Routes) {
        routes.addImmediate(.GET, "/healthz", healthz)
        routes.add(.GET, "/readyz", .anyone, readyz)
        routes.add(.GET, "/metrics", .metricsToken, metricsText)
        routes.add(.GET, "/.well-known/jwks.json", .anyone, jwks)
        routes.addImmediate(.GET, "/openapi.yaml", openapi)
    }

    func healthz(_ context: RequestContext) throws -> HTTPResponse {
        .json(["status": "ok"])
    }

    /// Ready when not draining, the database answers and every migration is applied; 503 otherwise.
    func readyz(_ context: RequestContext, _: Anyone) async throws -> HTTPResponse {
        if draining() { return OpsController.notReady("draining") }
        let health = self.health
        if let reason = try await readiness.value(for: "", { await health.unreadiness() }) {
            return OpsController.notReady(reason)
        }
        return .json(["status": "ready"])
    }

    static func notReady(_ reason: String) -> HTTPResponse {
        var response = HTTPResponse.json(["status": "not ready", "reason": .string(reason)], status: 503)
        response.headers.add(name: "retry-after", value: "1")
        return response
    }

    func metricsText(_ context: RequestContext, _: Anyone) async throws -> HTTPResponse {
        var extra = serverGauges()
        extra += PrometheusText.storeStatistics(health.statistics)
        // Read from the database, so every replica (and a `jobs run` process) reports the same; skipped while it is down.
        extra += await gauges.lines {
            // Readiness in the same shared round: scrapes within a few seconds ask the database once.
            let unready = await health.unreadiness()
            var lines = PrometheusText.ready(!draining() && unready == nil)
            if let gauges = try? await jobs.gauges() { lines += PrometheusText.registryGauges(gauges) }
            if let skew = try? await jobs.clock.skew() { lines += PrometheusText.clockSkew(skew) }
            return lines
        }
        extra += await slowGauges.lines {
            (try? await jobs.registrationCounts()).map(PrometheusText.registrations) ?? []
        }
        return HTTPResponse(
            status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: metrics.render(extra: extra))
    }

    func jwks(_ context: RequestContext, _: Anyone) async throws -> HTTPResponse {
        var response = HTTPResponse(status: 200, contentType: "application/json", body: try await tokens.jwks())
        response.headers.add(name: "cache-control", value: "public, max-age=300")
        return response
    }

    func openapi(_ context: RequestContext) throws -> HTTPResponse {
        HTTPResponse(
            status: 200, headers: ["content-type": "application/yaml; charset=utf-8"], body: OpenAPIDocument.bytes)
    }
}

/// The OpenAPI document compiled into the binary (`openapi.yaml` at the repository root links to it).
enum OpenAPIDocument {
    static let bytes: [UInt8] = PackageResources.openapi_yaml
}
