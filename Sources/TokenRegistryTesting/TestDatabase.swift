import Foundation
import Postgres

/// Fresh databases for tests, created on the cluster that `scripts/test.sh` starts and names in
/// `TEST_DATABASE_URL`. Each test gets its own database, so suites can run in parallel.
public enum TestDatabase {
    /// The admin connection string, or nil when no test cluster is configured.
    public static var adminURL: String? { ProcessInfo.processInfo.environment["TEST_DATABASE_URL"] }

    /// Whether live tests run: when a test cluster is configured, and always under `CI=true`, where a missing
    /// cluster must fail the run (``create()`` throws) instead of skipping the tests silently.
    public static var isAvailable: Bool { adminURL != nil || isCI }

    /// True under `CI=true`: a missing test dependency fails there, it never skips.
    public static var isCI: Bool { ProcessInfo.processInfo.environment["CI"] == "true" }

    /// Creates an empty database and returns its connection string.
    public static func create() async throws -> String {
        guard let admin = adminURL else {
            throw PostgresError(
                .connectionFailed, message: "TEST_DATABASE_URL is not set; run the tests with scripts/test.sh")
        }
        let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        let connection = try await PostgresConnection.connect(admin)
        try await connection.execute("CREATE DATABASE \(name)")
        return replacingDatabase(in: admin, with: name)
    }

    /// Runs `body` with the connection string of a fresh database, dropped afterwards whether `body` throws or not.
    public static func with(_ body: (String) async throws -> Void) async throws {
        let url = try await create()
        do { try await body(url) } catch {
            await drop(url)
            throw error
        }
        await drop(url)
    }

    /// Drops a database made by ``create()``.
    public static func drop(_ conninfo: String) async {
        guard let admin = adminURL, let name = databaseName(conninfo), name.hasPrefix("t_") else { return }
        guard let connection = try? await PostgresConnection.connect(admin) else { return }
        try? await connection.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
    }

    static func replacingDatabase(in url: String, with name: String) -> String {
        // URLs: postgresql://user@host:port/db?params ; key/value: host=... dbname=...
        if url.hasPrefix("postgres") {
            var parts = url.components(separatedBy: "?")
            var base = parts[0]
            if let slash = base.range(of: "/", options: .backwards), !base[..<slash.lowerBound].hasSuffix("/") {
                base = String(base[..<slash.lowerBound])
            }
            parts[0] = base + "/" + name
            return parts.joined(separator: "?")
        }
        let kept = url.split(separator: " ").filter { !$0.hasPrefix("dbname=") }
        return (kept + ["dbname=\(name)"]).joined(separator: " ")
    }

    static func databaseName(_ conninfo: String) -> String? {
        if conninfo.hasPrefix("postgres") {
            let base = conninfo.components(separatedBy: "?")[0]
            return base.components(separatedBy: "/").last
        }
        return conninfo.split(separator: " ").first { $0.hasPrefix("dbname=") }.map { String($0.dropFirst(7)) }
    }
}
