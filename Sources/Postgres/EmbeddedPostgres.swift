import Foundation
import Glibc

/// A private PostgreSQL cluster under a directory of the project (default `./.data/postgres`), for running the
/// service with no `DATABASE_URL`. It uses the Debian server binaries, listens only on a Unix socket in that
/// directory, and runs as the `postgres` user when the process is root (initdb refuses root).
public struct EmbeddedPostgres: Sendable {
    public let directory: String
    public let database: String
    public let port: Int

    public init(directory: String = ".data/postgres", database: String = "token_registry", port: Int = 5432) {
        let absolute = directory.hasPrefix("/") ? directory : FileManager.default.currentDirectoryPath + "/" + directory
        self.directory = absolute
        self.database = database
        self.port = port
    }

    var dataDirectory: String { directory + "/data" }
    var socketDirectory: String { directory + "/socket" }

    /// The libpq connection string of the cluster's database.
    public var conninfo: String { "host=\(socketDirectory) port=\(port) dbname=\(database) user=postgres" }

    /// Creates the cluster on first use, starts it unless it already runs, creates the database.
    ///
    /// - Returns: the connection string, and whether this call started the server (so the caller stops it).
    /// - Throws: ``PostgresError`` `.connectionFailed` with an actionable message (binaries missing, start failed).
    public func start() async throws -> (conninfo: String, started: Bool) {
        let bin = try EmbeddedPostgres.binaryDirectory()
        let asRoot = getuid() == 0
        try FileManager.default.createDirectory(atPath: socketDirectory, withIntermediateDirectories: true)
        if asRoot {
            try await run("/bin/chown", ["-R", "postgres:postgres", directory], asPostgres: false)
            try await run("/bin/chmod", ["700", directory], asPostgres: false)
        }
        if !FileManager.default.fileExists(atPath: dataDirectory + "/PG_VERSION") {
            try await run(
                bin + "/initdb", ["-D", dataDirectory, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"],
                asPostgres: asRoot)
        }
        let running = (try? await run(bin + "/pg_ctl", ["-D", dataDirectory, "status"], asPostgres: asRoot)) != nil
        if !running {
            let options = "-k \(socketDirectory) -c listen_addresses='' -p \(port)"
            // The server inherits pg_ctl's output; a pipe would stay open for the server's lifetime, so discard it
            // (the server writes its own log to server.log).
            do {
                try await run(
                    bin + "/pg_ctl",
                    ["-D", dataDirectory, "-l", directory + "/server.log", "-w", "-t", "60", "-o", options, "start"],
                    asPostgres: asRoot, captureOutput: false)
            } catch let error as PostgresError {
                let log = (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? ""
                throw PostgresError(.connectionFailed, message: error.message + " " + String(log.suffix(2000)))
            }
        }
        let admin = try await PostgresConnection.connect(
            "host=\(socketDirectory) port=\(port) dbname=postgres user=postgres")
        let exists = try await admin.query("SELECT 1 FROM pg_database WHERE datname = \(database)")
        if exists.isEmpty {
            let quoted = "\"" + database.replacingOccurrences(of: "\"", with: "\"\"") + "\""
            try await admin.execute("CREATE DATABASE \(quoted)")
        }
        return (conninfo, !running)
    }

    /// Stops the cluster (fast shutdown: open sessions are ended, committed data is safe).
    public func stop() async {
        guard let bin = try? EmbeddedPostgres.binaryDirectory() else { return }
        _ = try? await run(
            bin + "/pg_ctl", ["-D", dataDirectory, "-m", "fast", "-w", "stop"], asPostgres: getuid() == 0)
    }

    /// The newest `/usr/lib/postgresql/<version>/bin` that has `initdb`.
    static func binaryDirectory() throws -> String {
        let root = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        let candidates = versions.compactMap(Int.init).sorted(by: >).map { "\(root)/\($0)/bin" }
        guard let bin = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0 + "/initdb") }) else {
            throw PostgresError(
                .connectionFailed,
                message:
                    "DATABASE_URL is not set and no PostgreSQL server binaries were found under /usr/lib/postgresql; "
                    + "install them (Debian: apt-get install postgresql) or set DATABASE_URL")
        }
        return bin
    }

    /// Runs a helper to completion (at most 90 s), as `postgres` when asked; fails with its output.
    @discardableResult
    private func run(_ executable: String, _ arguments: [String], asPostgres: Bool, captureOutput: Bool = true)
        async throws -> String
    {
        let (program, argv) =
            asPostgres
            ? ("/usr/sbin/runuser", ["-u", "postgres", "--", executable] + arguments) : (executable, arguments)
        let result: (status: Int32, output: String)
        do {
            result = try await ChildProcess.run(program, argv, timeout: .seconds(90), keepOutput: captureOutput)
        } catch {
            throw PostgresError(.connectionFailed, message: "\(error)")
        }
        guard result.status == 0 else {
            throw PostgresError(
                .connectionFailed,
                message:
                    "\((executable as NSString).lastPathComponent) failed (exit \(result.status)): \(result.output)")
        }
        return result.output
    }
}
