import API
import Crypto
import Foundation
import JSON
import Postgres
import Registry
import RegistryPostgres

/// `token-registry serve | migrate | version | project | app | keys`.
enum TokenRegistryCommand {
    static let version = "0.1.0"

    static let usage = """
        token-registry — a self-hosted registry of app installations and push tokens (Firebase wire formats).

        Usage:
          token-registry serve                 run the HTTP service (migrates first)
          token-registry migrate               apply database migrations and exit
          token-registry project create --id <projectId> --number <projectNumber>
          token-registry project rotate-server-key --id <id|number> [--keep-old-for 24h]
          token-registry project revoke-server-key --id <id|number> [--all]
          token-registry app create --project <id|number> --platform ios|android|web
                                    [--bundle-id <id>] [--auto-init-default true|false]
                                    [--app-id <id>] [--api-key <key>] [--web-origin <origin>]…
          token-registry keys rotate           add a new auth-token signing key (old keys keep verifying)
          token-registry keys retire --kid <kid>
                                               stop a signing key from signing and verifying
          token-registry serviceaccount create --project <id|number> --out <file> [--base-url <URL>]
                                               write a service-account credential file (0600) for the admin SDKs
          token-registry serviceaccount list --project <id|number>
          token-registry serviceaccount revoke --key-id <private_key_id>
          token-registry breaker status --id <project>
          token-registry breaker clear --id <project> --channel fcm|apns|webpush [--confirm]
                                               send feedback's breaker: see it, clear it (docs/feedback.md)
          token-registry import --project <id|number> --format <format> <FILE|-> [--dry-run]
                                [--rejected <file>]
                                               import another service's export (onesignal-csv, fcm-django,
                                               push-notifications, sns, pinpoint, registry)
          token-registry export --project <id|number>
                                               every installation of the project as JSON lines
          token-registry audit list --id <project> [--after <seq>] [--limit <n>]
          token-registry audit verify [--id <project>]
                                               the audit log: page it, check its hash chain
          token-registry jobs run [--now <RFC 3339 time>]
                                               run each background job once (deliver, purge, expire, relay)
          token-registry probe [--path /healthz] [--host <address>] [--port $PORT] [--timeout-ms 2000]
                                               exit 0 if the local service answers 200 (container health checks)
          token-registry version
          token-registry <command> --help

        Configuration comes from the environment (see README.md): DATABASE_URL (unset: a private PostgreSQL under
        ./.data/postgres), HOST, PORT, LOG_LEVEL and the limits.
        """

    static func run(_ raw: [String]) async -> Int32 {
        do {
            guard let command = raw.first, command != "--help", command != "-h", command != "help" else {
                print(usage)
                return raw.isEmpty ? 2 : 0
            }
            let rest = Array(raw.dropFirst())
            switch command {
            case "version", "--version":
                print("token-registry \(version)")
                return 0
            case "serve": return try await Serve.run(try Arguments(rest))
            case "migrate": return try await Admin.migrate(try Arguments(rest))
            case "project": return try await Admin.project(try Arguments(rest))
            case "app": return try await Admin.app(try Arguments(rest))
            case "keys": return try await Admin.keys(try Arguments(rest))
            case "jobs": return try await Admin.jobs(try Arguments(rest))
            case "serviceaccount": return try await Admin.serviceAccount(try Arguments(rest))
            case "breaker": return try await BreakerCommand.run(try Arguments(rest))
            case "audit": return try await AuditCommand.run(try Arguments(rest))
            case "import": return try await ImportCommand.importing(try Arguments(rest))
            case "export": return try await ImportCommand.exporting(try Arguments(rest))
            case "probe": return try Probe.run(try Arguments(rest))
            default: throw CLIError("unknown command '\(command)'; see token-registry --help")
            }
        } catch let error as CLIError {
            FileHandle.standardError.write(Data("error: \(error.description)\n".utf8))
            return 2
        } catch let error as ConfigurationError {
            FileHandle.standardError.write(Data("error: \(error.description)\n".utf8))
            return 2
        } catch let error as RegistryError {
            FileHandle.standardError.write(Data("error: \(oneLine(error.message))\n".utf8))
            return 1
        } catch {
            FileHandle.standardError.write(Data("error: \(oneLine(error))\n".utf8))
            return 1
        }
    }

    /// Any failure as one line: a Foundation error by its description (never its `Error Domain=…` dump), line breaks
    /// folded, at most 1000 characters.
    static func oneLine(_ error: any Error) -> String {
        if error is CocoaError || type(of: error) is NSError.Type {
            return oneLine((error as NSError).localizedDescription)
        }
        return oneLine(String(describing: error))
    }

    static func oneLine(_ text: String) -> String {
        let folded = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .joined(separator: " ")
        return String(folded.prefix(1000))
    }
}

/// The database a command works on: `DATABASE_URL`, or the embedded cluster, started on demand.
struct CommandDatabase {
    let conninfo: String
    let embedded: EmbeddedPostgres?
    let startedHere: Bool

    static func open(_ configuration: Configuration, logger: Logger? = nil) async throws -> CommandDatabase {
        if let url = configuration.databaseURL { return CommandDatabase(conninfo: url, embedded: nil, startedHere: false) }
        let (embedded, note) = try await EmbeddedPostgres().located()
        if let note { logger?.warning(note) }
        let (conninfo, started) = try await embedded.start { step in logger?.info(step) }
        return CommandDatabase(conninfo: conninfo, embedded: embedded, startedHere: started)
    }

    /// Stops the embedded cluster if this process started it.
    func close() async {
        if startedHere { await embedded?.stop() }
    }

    /// Runs `body` on the database of `configuration`, stopping an embedded cluster this process started
    /// afterwards, whether `body` succeeds or fails.
    static func with<T>(
        _ configuration: Configuration, logger: Logger? = nil, _ body: (CommandDatabase) async throws -> T
    ) async throws -> T {
        let database = try await open(configuration, logger: logger)
        do {
            let value = try await body(database)
            await database.close()
            return value
        } catch {
            await database.close()
            throw error
        }
    }

    @discardableResult
    func migrate() async throws -> [Int] { try await Schema.migrator.migrate(conninfo: conninfo) }

    /// The composition root: the PostgreSQL stores on a pool of `configuration.databasePoolSize`, and the service
    /// on them.
    func application(configuration: Configuration, clock: any WallClock = SystemClock(), logger: Logger) async throws
        -> Application
    {
        let box = try MasterKey.box(
            configuration, dataDirectory: embedded?.directory ?? ".data", logger: logger)
        let pool = PostgresRegistry.pool(
            conninfo: conninfo, size: configuration.databasePoolSize,
            acquireTimeoutMillis: configuration.databaseAcquireTimeoutMillis,
            statementTimeoutMillis: configuration.databaseStatementTimeoutMillis,
            groupCommitMax: configuration.databaseGroupCommitMax, readBatchMax: configuration.databaseReadBatchMax,
            transactionPooled: configuration.databaseTransactionPooled,
            batchLockWaitMillis: configuration.databaseBatchLockWaitMillis, projectShare: configuration.databaseProjectShare)
        let readPool = configuration.databaseReadURL.map {
            PostgresRegistry.pool(
                conninfo: $0, size: configuration.databasePoolSize,
                acquireTimeoutMillis: configuration.databaseAcquireTimeoutMillis,
                statementTimeoutMillis: configuration.databaseStatementTimeoutMillis,
                readBatchMax: configuration.databaseReadBatchMax, transactionPooled: configuration.databaseTransactionPooled,
                projectShare: configuration.databaseProjectShare)
        }
        do {
            let sealed = try await PostgresRegistry.prepare(pool: pool, box: box)
            if sealed > 0 {
                logger.info("sealed secrets stored in clear by an earlier version", [("count", .int(sealed))])
            }
            if readPool != nil {
                logger.info("targeting reads go to the read replica (DATABASE_READ_URL), the primary when it is down")
            }
            return try await Application.build(
                configuration: configuration, stores: PostgresRegistry.stores(pool: pool, box: box, readPool: readPool),
                reads: readPool.map { PostgresRegistry.readStores(pool: $0, primary: pool, box: box) }, clock: clock,
                logger: logger,
                pools: { loops in
                    pool.loops.attach(loops)
                    readPool?.loops.attach(loops)
                })
        } catch {
            pool.close()
            readPool?.close()
            throw error
        }
    }
}

/// Prints a JSON document on standard output.
func printJSON(_ value: JSONValue) { print(value.text) }
