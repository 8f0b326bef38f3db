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

    /// docs/security.md, class 16: nothing blocks a thread of Dispatch's global queue. Its threads are as many as the
    /// cores, and while they are blocked every `Task.sleep` of the process waits (a pool's acquire time-out, group
    /// commit's reaper: four blocked threads held a 100 ms sleep for 2 s). Blocking calls run on a queue of their own.
    /// Every Swift line of every module is swept: a new call site fails here, named.
    @Test func noCodeRunsOnDispatchsGlobalQueue() throws {
        guard let walker = FileManager.default.enumerator(at: Self.sources, includingPropertiesForKeys: nil) else {
            Issue.record("no sources under \(Self.sources.path)")
            return
        }
        var swept = 0
        for case let url as URL in walker where url.pathExtension == "swift" {
            swept += 1
            for (n, line) in try String(contentsOf: url, encoding: .utf8).split(separator: "\n").enumerated() {
                let code = line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
                #expect(
                    !code.contains("DispatchQueue.global") && !code.contains(".global(qos"),
                    "\(url.lastPathComponent):\(n + 1) runs on Dispatch's global queue")
            }
        }
        #expect(swept > 100)
    }

    @Test func noTwoTopLevelFoldersDifferOnlyInCase() throws {
        let root = Self.sources.deletingLastPathComponent()
        let names = try FileManager.default.contentsOfDirectory(atPath: root.path)
        let folded = Dictionary(grouping: names, by: { $0.lowercased() })
        #expect(folded.values.allSatisfy { $0.count == 1 }, "\(folded.values.filter { $0.count > 1 })")
    }
}
