import API
import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// Who may call what: the route table declares it for every route, `openapi.yaml` says the same, and every route
/// refuses each credential its principal does not accept, in its own error shape.
@Suite("Principals, in process")
struct PrincipalTests {
    /// A credential a request may carry, and which of the table's credentials it is.
    struct Shown {
        let name: String
        let headers: [String: String]
        /// The credential it is (nil: it is none here): a server key of another project is one the IID API takes, since
        /// its paths name no project.
        let satisfies: Credential?
    }

    static func shown(_ w: World) -> [Shown] {
        [
            Shown(name: "nothing", headers: [:], satisfies: .anyone),
            Shown(
                name: "another project's server key", headers: ["Authorization": "Bearer \(w.otherServerKey)"],
                satisfies: .serverKeyOfAnyProject),
            Shown(name: "a made-up bearer", headers: ["Authorization": "Bearer not-a-key"], satisfies: nil),
            Shown(name: "another project's API key", headers: ["x-goog-api-key": w.otherAPIKey], satisfies: nil),
            Shown(
                name: "another project's installation token",
                headers: ["x-goog-firebase-installations-auth": w.otherAuthToken], satisfies: nil),
            Shown(name: "this project's API key alone", headers: ["x-goog-api-key": w.s.web.apiKey], satisfies: .apiKey),
            Shown(name: "a made-up refresh token", headers: ["Authorization": "FIS_v2 nope"], satisfies: nil),
            Shown(name: "a made-up AidLogin", headers: ["Authorization": "AidLogin 1:2"], satisfies: nil),
            Shown(name: "a made-up signature", headers: ["Registry-Signature": "t=1,v1=00"], satisfies: nil),
        ]
    }

    /// The route's template with this world's values in its parameters.
    static func path(_ template: String, _ w: World) -> String {
        var path = template
        for (name, value) in [
            ("project", w.project), ("fid", w.installation.fid), ("registration", w.installation.fid),
            ("token", w.token), ("topic", "news"), ("name", "crm"),
        ] {
            path = path.replacingOccurrences(of: "{\(name)}", with: value)
        }
        return path
    }

    @Test func everyRouteRefusesWhatItsPrincipalDoesNotAccept() async throws {
        try await World.with { w in try await Self.refuseEveryStranger(w) }
    }

    /// Every route with every credential its principal does not accept: a refusal in the route's own shape.
    static func refuseEveryStranger(_ w: World) async throws {
        for route in w.s.app.routeTable where route.credentials != [.anyone] {
            let path = Self.path(route.template, w)
            for shown in Self.shown(w) {
                if let satisfies = shown.satisfies, route.credentials.contains(satisfies) { continue }
                let reply = try await w.s.request(
                    route.method, path, headers: shown.headers.merging(["Content-Type": "application/json"]) { a, _ in a },
                    body: Array("{}".utf8))
                let what = "\(route.method) \(route.template) with \(shown.name): \(reply)"
                #expect([400, 401, 403].contains(reply.status), "\(what)")
                // In the route's own shape: Google's error object, IID's code (its 401 Google's HTML page), or the
                // register API's text.
                if route.template.hasPrefix("/iid/v1") || route.template.hasPrefix("/iid/info") {
                    if reply.status == 401 {
                        #expect(reply.header("content-type")?.hasPrefix("text/html") == true, "\(what)")
                    } else {
                        #expect(reply.json?["error"]?.stringValue != nil, "\(what)")
                    }
                } else if route.credentials == [.aidLogin] {
                    #expect(reply.text.hasPrefix("Error="), "\(what)")
                } else {
                    #expect(reply.json?["error"]?["code"]?.int64Value == Int64(reply.status), "\(what)")
                }
            }
        }
    }

    @Test func aServerKeyOfAnotherProjectIsForbiddenNotUnknown() async throws {
        try await World.with { w in
            for route in w.s.app.routeTable where route.credentials.contains(.serverKey) {
                let reply = try await w.s.request(
                    route.method, Self.path(route.template, w), headers: ["Authorization": "Bearer \(w.otherServerKey)"],
                    body: Array("{}".utf8))
                #expect(reply.status == 403, "\(route.method) \(route.template): \(reply)")
            }
        }
    }

    @Test func theTableDeclaresWhoMayCallEveryRouteAsOpenAPIDoes() async throws {
        try await InProcessService.with { s in
            let document = try String(
                contentsOf: ServiceProcess.repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
            let documented = Self.documentedSecurity(document)
            for route in s.app.routeTable {
                let key = "\(route.method) \(route.template)"
                #expect(!route.credentials.isEmpty, "\(key) declares no principal")
                #expect(
                    !route.credentials.contains(.anyone) || route.credentials == [.anyone],
                    "\(key): anyone, or named credentials")
                let declared = Set(route.credentials.compactMap(\.openAPIScheme))
                // The metrics token is needed only when the service has one: `{}` is documented beside it.
                let expected = route.credentials == [.metricsToken] ? declared.union([""]) : declared
                #expect(documented[key] == expected, "\(key): served \(expected.sorted()), documented \(documented[key]?.sorted() ?? [])")
            }
            // Browsers may call exactly the web SDKs' routes.
            let browser = Set(s.app.routeTable.filter(\.browser).map { "\($0.method) \($0.template)" })
            #expect(
                browser == [
                    "POST /v1/projects/{project}/installations",
                    "POST /v1/projects/{project}/installations/{fid}/authTokens:generate",
                    "DELETE /v1/projects/{project}/installations/{fid}",
                    "PUT /v1/projects/{project}/installations/{fid}/consent",
                    "GET /v1/projects/{project}/installations/{fid}/consent",
                    "POST /v1/projects/{project}/registrations",
                    "PATCH /v1/projects/{project}/registrations/{registration}",
                    "DELETE /v1/projects/{project}/registrations/{registration}",
                    "POST /v1/projects/{project}/registrations/{registration}/topicSubscriptions/{topic}:subscribe",
                    "POST /v1/projects/{project}/registrations/{registration}/topicSubscriptions/{topic}:unsubscribe",
                ])
        }
    }

    /// `"METHOD path"` to the security schemes of its operation's `security:` line (`""` for `{}`, nothing for `[]`).
    static func documentedSecurity(_ text: String) -> [String: Set<String>] {
        var result: [String: Set<String>] = [:]
        var inPaths = false
        var path: String?
        var operation: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "paths:" { inPaths = true; continue }
            if inPaths, let first = line.first, first != " " { break }
            guard inPaths else { continue }
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("  /"), !line.hasPrefix("   "), line.hasSuffix(":") {
                path = String(line.dropFirst(2).dropLast())
            } else if line.hasPrefix("    "), !line.hasPrefix("     "),
                ["get:", "post:", "put:", "patch:", "delete:"].contains(trimmed), let path
            {
                operation = trimmed.dropLast().uppercased() + " " + path
            } else if trimmed.hasPrefix("security:"), let operation {
                let list = trimmed.dropFirst("security:".count).trimmingCharacters(in: .whitespaces)
                var schemes = Set<String>()
                if list.contains("{}") { schemes.insert("") }
                var rest = Substring(list)
                while let open = rest.firstIndex(of: "{") {
                    let close = rest[open...].firstIndex(of: "}") ?? rest.endIndex
                    let inside = rest[rest.index(after: open)..<close].trimmingCharacters(in: .whitespaces)
                    if let colon = inside.firstIndex(of: ":") { schemes.insert(String(inside[..<colon])) }
                    rest = close < rest.endIndex ? rest[rest.index(after: close)...] : ""
                }
                result[operation] = schemes
            }
        }
        return result
    }
}
