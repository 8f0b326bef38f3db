import Crypto
import Foundation
import HTTP
import Registry

/// A configuration value that could not be used; start-up stops with this message.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    public let variable: String
    public let problem: String
    public var description: String { "invalid configuration: \(variable) \(problem)" }
}

/// Everything the service reads from its environment. Each variable is documented in the README.
public struct Configuration: Sendable {
    /// libpq connection string or URL; nil means "start the embedded cluster under ./.data/postgres".
    public var databaseURL: String?
    /// A streaming-replication standby of that database (`DATABASE_READ_URL`) for the targeting reads; nil: none.
    public var databaseReadURL: String?
    public var http: HTTPServer.Configuration
    public var logLevel: Logger.Level = .info
    public var databasePoolSize = 16
    /// How long a request waits for a free database connection before it is answered 503 with `Retry-After`.
    public var databaseAcquireTimeoutMillis = 5000
    /// Each database connection's `statement_timeout` (0: the server's own setting).
    public var databaseStatementTimeoutMillis = 30_000
    /// At most this many concurrent single-statement writes (token refreshes, installation creates) committed in one
    /// transaction; 1 commits each alone.
    public var databaseGroupCommitMax = 64
    /// How long a write in a group-committed batch waits for a lock before it leaves the batch and runs alone on a
    /// connection of its own (0: as long as the statement time-out allows, holding the batch).
    public var databaseBatchLockWaitMillis = 250
    /// The most pool connections one project's requests hold at once (0: a quarter of the pool, at least one): a
    /// project whose requests queue on its own row locks holds this many, never the pool (docs/security.md class 27).
    public var databaseProjectShare = 0
    /// At most this many concurrent point reads (an installation, registration, check-in or consent decision by its
    /// key) sent in one round trip; 1: each alone.
    public var databaseReadBatchMax = 64
    /// `DATABASE_POOLER=transaction`: the database URLs name a pooler in transaction mode (pgbouncer), so nothing
    /// is kept on a server session between transactions.
    public var databaseTransactionPooled = false
    public var drainTimeoutSeconds = 10.0
    /// Installation creates per second, per API key and per client address (bursts of twice that).
    public var createRatePerKey = 500.0
    public var createRatePerAddress = 100.0
    /// Unauthenticated writes of the register API per second per client address: `POST /checkin` and the GCM form
    /// of `POST /register` (bursts of twice that).
    public var checkinRatePerAddress = 10.0
    /// Consent statements an installation may record an hour (`PUT …/consent`, by the installation or its backend),
    /// in bursts of ``consentBurst``: each is a ledger row kept for the installation's life; 0 turns the limit off.
    public var consentRatePerHour = 60.0
    /// Enough for a backend to state every purpose an installation may hold twice in a row.
    public static let consentBurst = 64.0
    /// Proxies in front of the service that append the client's address to `X-Forwarded-For`; 0 takes the socket's.
    public var trustedProxyHops = 0
    /// When set, `GET /metrics` requires `Authorization: Bearer <token>`.
    public var metricsToken: String?
    /// The master key that seals secrets at rest (`SECRETS_KEY`, or the file `SECRETS_KEY_FILE` names); nil: a key
    /// file made on first start (see README).
    public var secretsKey: [UInt8]?
    /// Days without a refresh after which a registration is stale (still targeted) and expired (no longer targeted).
    public var staleDays = 30.0
    public var expireDays = 270.0
    /// Deletion delivery, purge and expiry timing (see ``DeletionPolicy``).
    public var deletionPolicy = DeletionPolicy()
    /// Send feedback's breaker, quarantine and retention (see ``FeedbackPolicy``).
    public var feedbackPolicy = FeedbackPolicy()
    /// Installations a user may have, and what a bind past that does (see ``UserPolicy``).
    public var userPolicy = UserPolicy()
    /// How long audit-log entries are kept (`AUDIT_RETENTION_DAYS`).
    public var auditRetentionDays = 400.0
    /// Audited actions whose calls append no entry (`AUDIT_SKIP_ACTIONS`): a backend's token refreshes, say, which are
    /// the bulk of a busy project's entries. Each must be an action a route declares.
    public var auditSkippedActions: Set<String> = []
    /// How often each replica runs the jobs; 0 turns the loop off (then run `token-registry jobs run`).
    public var jobsIntervalSeconds = 10.0

    public init(databaseURL: String? = nil, http: HTTPServer.Configuration = HTTPServer.Configuration()) {
        self.databaseURL = databaseURL
        self.http = http
    }

    /// Reads the environment.
    ///
    /// - Throws: ``ConfigurationError`` naming the first variable whose value is not usable.
    public static func fromEnvironment(_ env: [String: String] = ProcessInfo.processInfo.environment) throws
        -> Configuration
    {
        var c = Configuration()
        let reader = EnvironmentReader(env: env)
        c.databaseURL = env["DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
        // A mounted secret (Kubernetes): the URL, credentials included, from a file.
        if c.databaseURL == nil, let path = env["DATABASE_URL_FILE"], !path.isEmpty {
            guard let data = FileManager.default.contents(atPath: path),
                let url = String(data: data, encoding: .utf8)?.trimmingCharacters(in: .whitespacesAndNewlines),
                !url.isEmpty
            else { throw ConfigurationError(variable: "DATABASE_URL_FILE", problem: "names no readable, non-empty file (\(path))") }
            c.databaseURL = url
        }
        c.databaseReadURL = env["DATABASE_READ_URL"].flatMap { $0.isEmpty ? nil : $0 }
        if c.databaseReadURL != nil && c.databaseURL == nil {
            throw ConfigurationError(
                variable: "DATABASE_READ_URL",
                problem: "needs DATABASE_URL: a standby of the embedded cluster cannot exist")
        }
        c.http.host = env["HOST"] ?? "0.0.0.0"
        guard HTTPServer.canListen(on: c.http.host) else {
            throw ConfigurationError(
                variable: "HOST",
                problem: "must be an IP address such as 0.0.0.0, 127.0.0.1, :: (IPv6 and IPv4) or ::1, or localhost")
        }
        c.http.port = try reader.int("PORT", default: 8080, range: 0...65535)
        if let level = env["LOG_LEVEL"] {
            guard let parsed = Logger.Level(name: level) else {
                throw ConfigurationError(variable: "LOG_LEVEL", problem: "must be debug, info, warning or error")
            }
            c.logLevel = parsed
        }
        c.http.eventLoops = try reader.int(
            "EVENT_LOOPS", default: ProcessInfo.processInfo.activeProcessorCount, range: 1...256)
        c.http.maxConnections = try reader.int("MAX_CONNECTIONS", default: 16_384, range: 1...1_000_000)
        c.http.maxConnectionsPerAddress = try reader.int(
            "MAX_CONNECTIONS_PER_ADDRESS", default: 0, range: 0...1_000_000)
        c.http.connectionLimitKey = { ClientAddress.limiterKey($0) }
        c.http.maxBufferedInputTotal = try reader.int(
            "INPUT_BUDGET_BYTES", default: 64 * 1_048_576, range: 1_048_576...(1 << 40))
        c.http.maxPendingOutputTotal = try reader.int(
            "OUTPUT_BUDGET_BYTES", default: 64 * 1_048_576, range: 1_048_576...(1 << 40))
        c.http.limits.maxBodyBytes = try reader.int("MAX_BODY_BYTES", default: 1_048_576, range: 1024...64 * 1_048_576)
        c.http.limits.maxHeaderBytes = try reader.int("MAX_HEADER_BYTES", default: 32_768, range: 1024...1_048_576)
        c.http.limits.maxHeaderCount = try reader.int("MAX_HEADER_COUNT", default: 100, range: 8...10_000)
        c.http.limits.maxRequestLineBytes = try reader.int(
            "MAX_REQUEST_LINE_BYTES", default: 8192, range: 256...1_048_576)
        c.http.requestTimeoutMillis = UInt64(
            try reader.int("REQUEST_TIMEOUT_MS", default: 10_000, range: 100...600_000))
        c.http.idleTimeoutMillis = UInt64(try reader.int("IDLE_TIMEOUT_MS", default: 75_000, range: 100...3_600_000))
        c.drainTimeoutSeconds = Double(try reader.int("DRAIN_TIMEOUT_SECONDS", default: 10, range: 0...3600))
        c.databasePoolSize = try reader.int("DB_POOL_SIZE", default: 16, range: 1...1000)
        c.databaseAcquireTimeoutMillis = try reader.int("DB_ACQUIRE_TIMEOUT_MS", default: 5000, range: 10...600_000)
        c.databaseGroupCommitMax = try reader.int("DB_GROUP_COMMIT_MAX", default: 64, range: 1...1000)
        c.databaseReadBatchMax = try reader.int("DB_READ_BATCH_MAX", default: 64, range: 1...1000)
        c.databaseBatchLockWaitMillis = try reader.int("DB_BATCH_LOCK_WAIT_MS", default: 250, range: 0...60_000)
        c.databaseProjectShare = try reader.int("DB_POOL_PROJECT_SHARE", default: 0, range: 0...1000)
        c.databaseStatementTimeoutMillis = try reader.int(
            "DB_STATEMENT_TIMEOUT_MS", default: 30_000, range: 0...86_400_000)
        switch env["DATABASE_POOLER"] ?? "none" {
        case "none", "": c.databaseTransactionPooled = false
        case "transaction": c.databaseTransactionPooled = true
        default:
            throw ConfigurationError(
                variable: "DATABASE_POOLER", problem: "must be none or transaction (pgbouncer's pool_mode = transaction)")
        }
        c.createRatePerKey = Double(try reader.int("RATE_LIMIT_CREATE_PER_KEY", default: 500, range: 0...1_000_000))
        c.createRatePerAddress = Double(
            try reader.int("RATE_LIMIT_CREATE_PER_ADDRESS", default: 100, range: 0...1_000_000))
        c.checkinRatePerAddress = Double(
            try reader.int("RATE_LIMIT_CHECKIN_PER_ADDRESS", default: 10, range: 0...1_000_000))
        c.consentRatePerHour = Double(
            try reader.int("RATE_LIMIT_CONSENT_PER_HOUR", default: 60, range: 0...3_600_000))
        if env["TRUST_FORWARDED_FOR"] != nil {
            throw ConfigurationError(
                variable: "TRUST_FORWARDED_FOR",
                problem:
                    "was replaced by TRUSTED_PROXY_HOPS (the number of proxies in front; 1 behind one load balancer)")
        }
        c.trustedProxyHops = try reader.int("TRUSTED_PROXY_HOPS", default: 0, range: 0...16)
        if let text = env["SECRETS_KEY"], !text.isEmpty {
            guard let key = Configuration.masterKey(text) else {
                throw ConfigurationError(variable: "SECRETS_KEY", problem: "must be the base64 of 32 random bytes")
            }
            c.secretsKey = key
        } else if let path = env["SECRETS_KEY_FILE"], !path.isEmpty {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ConfigurationError(variable: "SECRETS_KEY_FILE", problem: "names no readable file (\(path))")
            }
            guard
                let key = Configuration.masterKey(String(decoding: data, as: UTF8.self))
                    ?? (data.count == 32 ? Array(data) : nil)
            else {
                throw ConfigurationError(
                    variable: "SECRETS_KEY_FILE", problem: "must hold the base64 of 32 random bytes (or the 32 bytes)")
            }
            c.secretsKey = key
        }
        if let token = env["METRICS_TOKEN"], !token.isEmpty {
            guard token.utf8.count >= 16, token.utf8.count <= 256, !token.contains(" ") else {
                throw ConfigurationError(variable: "METRICS_TOKEN", problem: "must be 16-256 characters without spaces")
            }
            c.metricsToken = token
        }
        c.staleDays = Double(try reader.int("STALE_AFTER_DAYS", default: 30, range: 1...3650))
        c.expireDays = Double(try reader.int("EXPIRE_AFTER_DAYS", default: 270, range: 1...3650))
        c.deletionPolicy.backoffBase = Double(
            try reader.int("DELIVERY_BACKOFF_BASE_SECONDS", default: 1, range: 1...3600))
        c.deletionPolicy.backoffMax = Double(
            try reader.int("DELIVERY_BACKOFF_MAX_SECONDS", default: 3600, range: 1...86_400))
        c.deletionPolicy.auditPeriod =
            Double(try reader.int("DELETION_AUDIT_DAYS", default: 30, range: 0...180)) * 86_400
        c.deletionPolicy.expireAfter =
            Double(try reader.int("INSTALLATION_EXPIRE_DAYS", default: 270, range: 1...3650)) * 86_400
        c.deletionPolicy.eventRetention =
            Double(try reader.int("EVENT_RETENTION_DAYS", default: 7, range: 1...365)) * 86_400
        if let hosts = env["LINKED_SERVICE_HOSTS"], !hosts.isEmpty {
            c.deletionPolicy.endpoints.allowedHosts = Set(
                hosts.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() })
        }
        c.deletionPolicy.endpoints.allowPrivate = try reader.bool("LINKED_SERVICE_ALLOW_PRIVATE", default: false)
        c.jobsIntervalSeconds = Double(try reader.int("JOBS_INTERVAL_SECONDS", default: 10, range: 0...86_400))
        c.feedbackPolicy.breakerShare =
            Double(try reader.int("FEEDBACK_BREAKER_PERCENT", default: 50, range: 1...100)) / 100
        c.feedbackPolicy.breakerMinimum = try reader.int("FEEDBACK_BREAKER_MINIMUM", default: 100, range: 1...1_000_000)
        c.feedbackPolicy.window = Double(
            try reader.int("FEEDBACK_BREAKER_WINDOW_SECONDS", default: 600, range: 60...86_400))
        c.feedbackPolicy.retiredRetention =
            Double(try reader.int("FEEDBACK_RETIRED_RETENTION_DAYS", default: 30, range: 1...3650)) * 86_400
        c.userPolicy.maxInstallationsPerUser = try reader.int(
            "USER_INSTALLATIONS_LIMIT", default: 100, range: 1...UserPolicy.maxInstallationsLimit)
        if let overflow = env["USER_INSTALLATIONS_OVERFLOW"] {
            guard let value = UserPolicy.Overflow(rawValue: overflow) else {
                throw ConfigurationError(
                    variable: "USER_INSTALLATIONS_OVERFLOW",
                    problem: "must be refuse or unbind-least-recent, not '\(overflow.prefix(40))'")
            }
            c.userPolicy.overflow = value
        }
        c.auditRetentionDays = Double(try reader.int("AUDIT_RETENTION_DAYS", default: 400, range: 1...36_500))
        if let skipped = env["AUDIT_SKIP_ACTIONS"] {
            let names = skipped.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            for name in names where !name.isEmpty {
                let isNameByte = { (b: UInt8) in
                    b == 0x2E || b == 0x5F || (0x30...0x39).contains(b) || (0x41...0x5A).contains(b)
                        || (0x61...0x7A).contains(b)
                }
                guard name.utf8.count <= 64, name.utf8.allSatisfy(isNameByte) else {
                    throw ConfigurationError(
                        variable: "AUDIT_SKIP_ACTIONS",
                        problem: "'\(name.prefix(40))' is not an action name (letters, digits, '.' and '_', at most 64)")
                }
                c.auditSkippedActions.insert(name)
            }
        }
        guard c.expireDays > c.staleDays else {
            throw ConfigurationError(variable: "EXPIRE_AFTER_DAYS", problem: "must be larger than STALE_AFTER_DAYS")
        }
        return c
    }
}

struct EnvironmentReader {
    let env: [String: String]

    func int(_ name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
        guard let text = env[name] else { return value }
        guard let parsed = Int(text.trimmingCharacters(in: " ")), range.contains(parsed) else {
            throw ConfigurationError(
                variable: name,
                problem:
                    "must be a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text.prefix(40))'")
        }
        return parsed
    }

    func bool(_ name: String, default value: Bool) throws -> Bool {
        guard let text = env[name] else { return value }
        switch text.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw ConfigurationError(variable: name, problem: "must be true or false, not '\(text.prefix(40))'")
        }
    }
}

extension Configuration {
    /// 32 bytes from their base64 (standard or URL-safe, padded or not, surrounding white space ignored).
    public static func masterKey(_ text: String) -> [UInt8]? {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        let urlSafe = trimmed.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        guard let key = Base64URL.decode(urlSafe), key.count == 32 else { return nil }
        return key
    }
}
