import Foundation
import Testing
import TokenRegistryTesting

/// `openapi.yaml` as a client contract: every operation is named for a person (generators name functions and
/// models after `operationId` and component names, not paths), every body a client handles is a named schema, and
/// every status a route answers is documented.
@Suite("OpenAPI document as a client contract")
struct OpenAPIDocumentTests {
    /// One operation of the document's `paths`, read line by line (the file is written one path, one operation and
    /// one status per line).
    struct Operation {
        let key: String
        var operationId: String?
        var summary = false
        var tags = false
        var statuses: Set<Int> = []
        var inlineObjects: [String] = []
    }

    static func operations() throws -> [String: Operation] {
        let text = try String(
            contentsOf: ServiceProcess.repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        var result: [String: Operation] = [:]
        var anchors: [String: Set<Int>] = [:]
        var inPaths = false
        var path: String?
        var current: Operation?
        var anchor: String?
        func finish() {
            if let done = current {
                result[done.key] = done
                if let anchor { anchors[anchor] = done.statuses }
            }
            current = nil
            anchor = nil
        }
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "paths:" { inPaths = true; continue }
            if inPaths, let first = line.first, first != " " { break }
            guard inPaths else { continue }
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("  /"), !line.hasPrefix("   "), line.hasSuffix(":") {
                finish()
                path = String(line.dropFirst(2).dropLast())
            } else if line.hasPrefix("    "), !line.hasPrefix("     "),
                ["get:", "post:", "put:", "patch:", "delete:"].contains(trimmed), let path
            {
                finish()
                current = Operation(key: trimmed.dropLast().uppercased() + " " + path)
            } else if current != nil {
                if trimmed.hasPrefix("operationId:") {
                    current?.operationId = trimmed.dropFirst("operationId:".count).trimmingCharacters(in: .whitespaces)
                }
                if trimmed.hasPrefix("summary:") { current?.summary = true }
                if trimmed.hasPrefix("tags: [") { current?.tags = true }
                if trimmed.hasPrefix("responses: &") { anchor = String(trimmed.dropFirst("responses: &".count)) }
                if trimmed.hasPrefix("responses: *") {
                    current?.statuses = anchors[String(trimmed.dropFirst("responses: *".count))] ?? []
                }
                if line.hasPrefix("        \""), let code = Int(trimmed.dropFirst().prefix(3)) {
                    current?.statuses.insert(code)
                }
                // A body a client handles is a named component; the YAML document itself is the one exception.
                if (trimmed.contains("schema: { type: object") || trimmed.contains("schema: { allOf"))
                    && !trimmed.contains("application/yaml")
                {
                    current?.inlineObjects.append(String(trimmed.prefix(60)))
                }
            }
        }
        finish()
        return result
    }

    @Test func everyOperationIsNamedForAPerson() throws {
        let operations = try Self.operations()
        #expect(operations.count >= 45)
        var seen: [String: String] = [:]
        for (key, operation) in operations.sorted(by: { $0.key < $1.key }) {
            guard let id = operation.operationId else {
                Issue.record("\(key) has no operationId")
                continue
            }
            // lowerCamelCase words, as a person names a function: never the path's segments.
            #expect(id.range(of: "^[a-z][a-zA-Z]+$", options: .regularExpression) != nil, "\(key): \(id)")
            #expect(!id.lowercased().contains("v1") && !id.lowercased().contains("projects"), "\(key): \(id) is path-derived")
            if let other = seen[id] { Issue.record("\(key) and \(other) share operationId \(id)") }
            seen[id] = key
            #expect(operation.summary && operation.tags, "\(key) needs a summary and a tag")
            #expect(operation.inlineObjects == [], "\(key) has inline object schemas: \(operation.inlineObjects)")
        }
    }

    /// Every status the service answered while every route ran its success path and refused every stranger is in
    /// that operation's `responses`.
    @Test func everyStatusTheRoutesAnswerIsDocumented() async throws {
        let operations = try Self.operations()
        try await World.with { w in
            try await EveryRouteTests.exerciseEveryRoute(w)
            try await PrincipalTests.refuseEveryStranger(w)
            for (route, statuses) in w.s.exchanges.statuses.sorted(by: { $0.key < $1.key }) {
                let documented = operations[route]?.statuses ?? []
                #expect(statuses.isSubset(of: documented), "\(route) answered \(statuses.sorted()), documents \(documented.sorted())")
            }
        }
    }

    /// Every route that reaches the database can meet a transient failure: 503 with Retry-After is documented for it.
    @Test func everyRouteThatReachesTheDatabaseDocumentsItsRetry() throws {
        let inMemory: Set<String> = [
            "GET /healthz", "GET /readyz", "GET /metrics", "GET /.well-known/jwks.json", "GET /openapi.yaml",
            "POST /v1/projects/{project}/messages:send", "POST /fcm/send",
        ]
        for (key, operation) in try Self.operations() where !inMemory.contains(key) {
            #expect(operation.statuses.contains(503), "\(key) documents no 503")
        }
    }
}
