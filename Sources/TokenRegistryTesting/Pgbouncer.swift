import Foundation
import Glibc
import Postgres

/// A pgbouncer in transaction mode in front of the test cluster, on a Unix socket of its own, for the tests of
/// ``PostgresConnection/SessionSettings/transactionPooled``: each client transaction may run on another of its
/// `poolSize` server connections, as in production behind pgbouncer 1.18.
public final class Pgbouncer: @unchecked Sendable {
    // @unchecked Sendable: `process` is only started, signalled and waited on.
    let process: Process
    let directory: String
    let port = 6432

    /// Debian's binary (`apt-get install pgbouncer`).
    public static let binary = "/usr/sbin/pgbouncer"

    /// Whether the tests that need it run: always under `CI=true`, where a missing binary fails them.
    public static var isAvailable: Bool {
        TestDatabase.isCI || (TestDatabase.isAvailable && FileManager.default.isExecutableFile(atPath: binary))
    }

    /// Starts one with at most `poolSize` server connections per database, and waits until it answers.
    public init(poolSize: Int) async throws {
        guard let admin = TestDatabase.adminURL else {
            throw PostgresError(.connectionFailed, message: "TEST_DATABASE_URL is not set; run the tests with scripts/test.sh")
        }
        guard FileManager.default.isExecutableFile(atPath: Self.binary) else {
            throw PostgresError(.connectionFailed, message: "\(Self.binary) is missing (apt-get install pgbouncer)")
        }
        directory = NSTemporaryDirectory() + "pgbouncer-" + UUID().uuidString.prefix(8).lowercased()
        // Its socket takes anyone (auth_type trust) to the cluster's superuser: only the user running pgbouncer may
        // reach it (root, the tests' user when they run as root, passes the directory's permissions regardless).
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if getuid() == 0, let postgres = getpwnam("postgres") {
            guard chown(directory, postgres.pointee.pw_uid, postgres.pointee.pw_gid) == 0 else {
                throw PostgresError(.connectionFailed, message: "chown \(directory) to postgres failed")
            }
        }
        let upstream = admin.split(separator: " ").filter { $0.hasPrefix("host=") || $0.hasPrefix("port=") }
        let user = admin.split(separator: " ").first { $0.hasPrefix("user=") }.map { String($0.dropFirst(5)) }
            ?? "postgres"
        try "\"\(user)\" \"\"\n".write(toFile: directory + "/users.txt", atomically: true, encoding: .utf8)
        try """
            [databases]
            * = \(upstream.joined(separator: " "))
            [pgbouncer]
            listen_addr =
            unix_socket_dir = \(directory)
            listen_port = \(port)
            auth_type = trust
            auth_file = \(directory)/users.txt
            pool_mode = transaction
            default_pool_size = \(poolSize)
            max_client_conn = 2000
            logfile = \(directory)/pgbouncer.log

            """.write(toFile: directory + "/pgbouncer.ini", atomically: true, encoding: .utf8)
        process = Process()
        // pgbouncer refuses to run as root; the test cluster's own user runs it then.
        if getuid() == 0 {
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
            process.arguments = ["-u", "postgres", "--", Self.binary, directory + "/pgbouncer.ini"]
        } else {
            process.executableURL = URL(fileURLWithPath: Self.binary)
            process.arguments = [directory + "/pgbouncer.ini"]
        }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            do {
                _ = try await PostgresConnection.connect(url(for: admin)).query("SELECT 1 AS one")
                break
            } catch {
                if ContinuousClock.now > deadline || !process.isRunning {
                    stop()
                    throw PostgresError(.connectionFailed, message: "pgbouncer did not start: \(error)")
                }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    /// `conninfo` (a database of the test cluster) reached through this pgbouncer.
    public func url(for conninfo: String) -> String {
        let kept = conninfo.split(separator: " ").filter { !$0.hasPrefix("host=") && !$0.hasPrefix("port=") }
        return (["host=\(directory)", "port=\(port)"] + kept).joined(separator: " ")
    }

    public func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// ``stop()``, waited for on a queue of its own: `waitUntilExit` blocks its thread until pgbouncer has exited,
    /// and the test calling it runs on one of the cooperative pool's two threads.
    public func shutdown() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue(label: "pgbouncer.stop").async {
                self.stop()
                continuation.resume()
            }
        }
    }

    deinit { stop() }
}
