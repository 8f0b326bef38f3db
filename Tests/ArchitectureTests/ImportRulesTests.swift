import Foundation
import Testing

/// The module layering of docs/architecture.md, checked on the sources themselves: a file that imports a module its
/// layer may not see fails here, whatever the manifest says.
@Suite("Import rules")
struct ImportRulesTests {
    /// Each module of ours, and the modules of ours it may import (system modules are not listed: any may use
    /// Foundation, Glibc, Dispatch, Synchronization).
    static let allowed: [String: Set<String>] = [
        "JSON": [],
        "HTTP": ["CLinuxShims", "CZlib"],
        "Postgres": ["CLibPQ"],
        "Crypto": ["COpenSSL"],
        "Registry": ["Crypto", "JSON"],
        "RegistryPostgres": ["Registry", "Postgres", "Crypto", "JSON"],
        "API": ["HTTP", "Registry", "JSON", "Crypto"],
        "token-registry": ["API", "HTTP", "CLinuxShims", "Registry", "RegistryPostgres", "Postgres", "JSON", "Crypto"],
        "TokenRegistryTesting": ["API", "HTTP", "JSON", "Postgres", "Registry", "RegistryPostgres", "Crypto"],
    ]

    static let ours: Set<String> = Set(allowed.keys).union(["CLibPQ", "COpenSSL", "CZlib", "CLinuxShims"])

    static var sources: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources")
    }

    /// `(file, imported module)` for every `import` line of a module's Swift files.
    static func imports(of module: String) throws -> [(String, String)] {
        let root = sources.appendingPathComponent(module)
        guard let walker = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil) else { return [] }
        var found: [(String, String)] = []
        for case let url as URL in walker where url.pathExtension == "swift" {
            for line in try String(contentsOf: url, encoding: .utf8).split(separator: "\n") {
                let words = line.split(separator: " ").map(String.init)
                guard let index = words.firstIndex(of: "import"), index + 1 < words.count,
                    words[..<index].allSatisfy({
                        ["@testable", "public", "package", "internal", "@_exported"].contains($0)
                    })
                else { continue }
                found.append((url.lastPathComponent, words[index + 1].split(separator: ".").first.map(String.init)!))
            }
        }
        return found
    }

    @Test(arguments: allowed.keys.sorted())
    func moduleImportsOnlyWhatItsLayerMaySee(_ module: String) throws {
        let imports = try Self.imports(of: module)
        #expect(!imports.isEmpty, "no Swift sources found for \(module) under \(Self.sources.path)")
        for (file, imported) in imports where Self.ours.contains(imported) {
            #expect(Self.allowed[module]!.contains(imported), "\(module)/\(file) imports \(imported)")
        }
    }

    @Test func theDomainAndTheAPIKnowNoSQL() throws {
        for module in ["Registry", "API"] {
            let leaks = try Self.imports(of: module).filter { $0.1 == "Postgres" || $0.1 == "CLibPQ" }
            #expect(leaks.isEmpty, "\(module) imports PostgreSQL: \(leaks.map(\.0))")
        }
    }

    /// docs/security.md, class 16: nothing runs on Dispatch's global queue or a concurrent queue (which run on its
    /// threads). Its threads are as many as the cores, and while they are blocked every `Task.sleep` of the process
    /// waits (a pool's acquire time-out, group commit's reaper: four blocked threads held a 100 ms sleep for 2 s).
    /// Blocking calls run on a queue of their own. Every line of every source and test file is swept (comments
    /// aside): a new use fails here, named.
    @Test func noCodeRunsOnDispatchsGlobalQueue() throws {
        let root = Self.sources.deletingLastPathComponent()
        var swept = 0
        for folder in ["Sources", "Tests"] {
            let base = root.appendingPathComponent(folder)
            guard let walker = FileManager.default.enumerator(at: base, includingPropertiesForKeys: nil) else {
                Issue.record("no sources under \(base.path)")
                continue
            }
            for case let url as URL in walker where url.pathExtension == "swift" {
                swept += 1
                for (n, line) in try String(contentsOf: url, encoding: .utf8).split(separator: "\n").enumerated() {
                    let code = Self.withoutComment(line)
                    for use in [".global(", ".concurrent"] where code.contains(use) {
                        // This test's own list of what it looks for.
                        guard url.lastPathComponent != "ImportRulesTests.swift" else { continue }
                        Issue.record("\(folder)/\(url.lastPathComponent):\(n + 1) uses \(use) (a queue of its own)")
                    }
                }
            }
        }
        #expect(swept > 150)
    }

    /// A line without its comment: a line that starts with `//`, or what follows ` //` (a URL in a string keeps its
    /// `//`).
    static func withoutComment(_ line: Substring) -> Substring {
        if line.drop(while: { $0 == " " }).hasPrefix("//") { return "" }
        guard let range = line.range(of: " //") else { return line }
        return line[..<range.lowerBound]
    }

    @Test func noTwoTopLevelFoldersDifferOnlyInCase() throws {
        let root = Self.sources.deletingLastPathComponent()
        let names = try FileManager.default.contentsOfDirectory(atPath: root.path)
        let folded = Dictionary(grouping: names, by: { $0.lowercased() })
        #expect(folded.values.allSatisfy { $0.count == 1 }, "\(folded.values.filter { $0.count > 1 })")
    }
}
