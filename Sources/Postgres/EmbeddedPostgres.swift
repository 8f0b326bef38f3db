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

    /// Where the cluster can live. As root the server runs as `postgres`, which must be able to reach the directory;
    /// under a private parent (root's home is 0700) it cannot, so the cluster moves to
    /// `/var/lib/token-registry/<checkout>-<hash of the path>` (the same place for the same checkout every time).
    ///
    /// - Returns: this cluster, or the relocated one, and a note saying why it moved.
    public func located() async throws -> (cluster: EmbeddedPostgres, note: String?) {
        guard getuid() == 0 else { return (self, nil) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try await run("/bin/chown", ["postgres:postgres", directory], asPostgres: false)
        let reachable =
            (try? await run("/usr/bin/test", ["-x", directory, "-a", "-w", directory], asPostgres: true)) != nil
        if reachable { return (self, nil) }
        let checkout = URL(fileURLWithPath: FileManager.default.currentDirectoryPath).lastPathComponent
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in directory.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        let moved = "/var/lib/token-registry/\(checkout)-\(String(hash, radix: 16).prefix(8))"
        let relocated = EmbeddedPostgres(directory: moved, database: database, port: port)
        return (
            relocated,
            "the postgres user cannot reach \(directory) (a parent directory is private); the cluster lives in \(moved)"
        )
    }

    /// Creates the cluster on first use, starts it unless it already runs, creates the database. A cluster left
    /// running by a service that was killed is adopted: whoever holds the directory's lock owns the cluster and
    /// stops it on exit; a second service on the same directory while the first runs shares it and leaves it up.
    ///
    /// - Parameter progress: told each step (creating, starting, adopting), so a first start is never silent.
    /// - Returns: the connection string, and whether the caller owns the server (so stops it on exit).
    /// - Throws: ``PostgresError`` `.connectionFailed` with an actionable message (binaries missing, start failed).
    public func start(progress: @Sendable (String) -> Void = { _ in }) async throws -> (conninfo: String, started: Bool)
    {
        let bin = try EmbeddedPostgres.binaryDirectory()
        let asRoot = getuid() == 0
        try FileManager.default.createDirectory(atPath: socketDirectory, withIntermediateDirectories: true)
        let owner = EmbeddedPostgres.lock(directory + "/owner.lock")
        if asRoot {
            try await run("/bin/chown", ["-R", "postgres:postgres", directory], asPostgres: false)
            try await run("/bin/chmod", ["700", directory], asPostgres: false)
        }
        if !FileManager.default.fileExists(atPath: dataDirectory + "/PG_VERSION") {
            progress("creating the PostgreSQL cluster in \(dataDirectory)")
            try await run(
                bin + "/initdb",
                [
                    "-D", dataDirectory, "-U", "postgres", "--auth-local=peer", "--auth-host=reject", "-E", "UTF8",
                    "--locale=C",
                ],
                asPostgres: asRoot)
        }
        // Only the owner is admitted, every start (a cluster an older version made with `trust` is closed too): the
        // socket's directory is the owner's alone, and the server admits the owner's account by peer authentication.
        try writeAuthentication()
        try await run("/bin/chmod", ["700", directory, socketDirectory, dataDirectory], asPostgres: asRoot)
        let running = (try? await run(bin + "/pg_ctl", ["-D", dataDirectory, "status"], asPostgres: asRoot)) != nil
        if running {
            progress(
                owner
                    ? "adopting the PostgreSQL left running in \(dataDirectory); it stops when this service does"
                    : "sharing the PostgreSQL in \(dataDirectory) with the service that started it")
            try await run(bin + "/pg_ctl", ["-D", dataDirectory, "reload"], asPostgres: asRoot)
        } else {
            progress("starting PostgreSQL (\(dataDirectory), socket in \(socketDirectory))")
            let options = "-k \(socketDirectory) -c listen_addresses='' -c unix_socket_permissions=0700 -p \(port)"
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
        return (conninfo, owner || !running)
    }

    /// The OS accounts admitted, as the database superuser `postgres`: this process's user, and the server's own
    /// (`postgres` when the service runs as root).
    var admittedAccounts: [String] {
        let me = getpwuid(getuid()).map { String(cString: $0.pointee.pw_name) } ?? "postgres"
        return Array(Set([me, "postgres"])).sorted()
    }

    /// `pg_hba.conf` and `pg_ident.conf`: local connections by peer authentication, mapped from the admitted
    /// accounts only; no TCP at all (the server does not listen on it either). Never `trust`.
    static func authentication(admitting accounts: [String]) -> (hba: String, ident: String) {
        let hba = """
            # Written by token-registry at every start: only the accounts in pg_ident.conf's "owner" map get in.
            local all all peer map=owner
            host all all all reject

            """
        let ident = "# Written by token-registry at every start.\n"
            + accounts.map { "owner \($0) postgres\n" }.joined()
        return (hba, ident)
    }

    private func writeAuthentication() throws {
        let (hba, ident) = EmbeddedPostgres.authentication(admitting: admittedAccounts)
        for (name, text) in [("pg_hba.conf", hba), ("pg_ident.conf", ident)] {
            let path = dataDirectory + "/" + name
            try text.write(toFile: path, atomically: false, encoding: .utf8)
            chmod(path, 0o600)
            if getuid() == 0, let postgres = getpwnam("postgres") {
                chown(path, postgres.pointee.pw_uid, postgres.pointee.pw_gid)
            }
        }
    }

    /// Takes the directory's owner lock (`flock`, held until the process ends: the kernel drops it however the
    /// process dies). False when a live service holds it.
    static func lock(_ path: String) -> Bool {
        let fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return false }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 { return true }  // kept open on purpose: the lock lives with the process
        close(fd)
        return false
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
