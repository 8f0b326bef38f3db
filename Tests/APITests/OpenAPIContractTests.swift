import Foundation
import Testing
import TokenRegistryTesting

/// `openapi.yaml` describes every route exactly as served: the same (method, path) pairs, no more, no less.
@Suite("OpenAPI contract", .enabled(if: TestDatabase.isAvailable))
struct OpenAPIContractTests {
    /// The (method, path) pairs of the document's `paths` section (the file is written one path and one
    /// operation per line, which this reads without a YAML library).
    static func documentedOperations(_ text: String) -> Set<String> {
        var operations = Set<String>()
        var inPaths = false
        var current: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "paths:" { inPaths = true; continue }
            if inPaths, let first = line.first, first != " " { break }
            guard inPaths else { continue }
            if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                current = String(line.dropFirst(2).dropLast())
            } else if let current, line.hasPrefix("    "), !line.hasPrefix("     "),
                ["get:", "post:", "put:", "patch:", "delete:"].contains(line.trimmingCharacters(in: .whitespaces))
            {
                operations.insert(line.trimmingCharacters(in: .whitespaces).dropLast().uppercased() + " " + current)
            }
        }
        return operations
    }

    @Test func everyServedRouteIsDocumentedAndNothingElse() async throws {
        try await TestService.with { s in
            let served = try await s.request("GET", "/openapi.yaml")
            #expect(served.status == 200)
            let file = try String(
                contentsOf: ServiceProcess.repositoryRoot.appendingPathComponent("openapi.yaml"), encoding: .utf8)
            #expect(served.text == file, "GET /openapi.yaml must serve the repository's openapi.yaml")
            let documented = Self.documentedOperations(file)
            let routes = Set(s.app.routeTable.map { "\($0.method) \($0.template)" })
            #expect(routes.subtracting(documented).sorted() == [], "served but not documented")
            #expect(documented.subtracting(routes).sorted() == [], "documented but not served")
            #expect(routes.count > 25)
        }
    }
}
