import API
import Crypto
import Foundation
import JSON
import Registry

/// `token-registry audit`: the audit log from the command line; and the entries the CLI's own actions append.
enum AuditCommand {
    static let usage = """
        token-registry audit list --id <project id|number> [--after <seq>] [--limit <n>]
          Prints the project's chained entries after <seq> (default 0), one JSON object a line.
        token-registry audit verify [--id <project id|number> [--head <seq>:<hex hash>]…]
          Chains what is pending, then checks each project's chain (or the one named) from its anchor to its head:
          numbering, each previous hash, each hash recomputed, each clear target against its digest, and each --head
          (a head the jobs logged as "audit chain head", kept elsewhere) still in the chain. Prints a report a
          project; exits 1 when any chain does not hold. `-` names the deployment's chain (signing keys, jobs runs).
        """

    /// The chain that records actions on the deployment as a whole (signing keys), not on one project.
    static let deploymentChain = "-"

    static func run(_ arguments: Arguments) async throws -> Int32 {
        guard !arguments.wantsHelp, let verb = arguments.words.first else {
            print(usage)
            return arguments.wantsHelp ? 0 : 2
        }
        switch verb {
        case "list":
            try arguments.allow(["id", "after", "limit"])
            let after = Int64(arguments.options["after"] ?? "0")
            let limit = Int(arguments.options["limit"] ?? "1000")
            guard let after, after >= 0, let limit, (1...100_000).contains(limit) else {
                throw CLIError("--after must be a whole number, --limit 1 to 100000")
            }
            return try await Admin.withApplication { app in
                let projectID = try await chainID(app, arguments.required("id"))
                try await app.services.audit.chain()
                for entry in try await app.services.audit.entries(projectID: projectID, afterSeq: after, limit: limit) {
                    printJSON(AuditCommand.json(entry))
                }
                return 0
            }
        case "verify":
            try arguments.allow(["id", "head"])
            let heads = try (arguments.repeated["head"] ?? []).map { text -> (seq: Int64, hash: [UInt8]) in
                let parts = text.split(separator: ":")
                guard parts.count == 2, let seq = Int64(parts[0]), let hash = Hex.decode(String(parts[1])),
                    hash.count == 32
                else { throw CLIError("--head must be <seq>:<64 hex digits>, as the jobs log it") }
                return (seq, hash)
            }
            guard heads.isEmpty || arguments.options["id"] != nil else { throw CLIError("--head needs --id") }
            return try await Admin.withApplication { app in
                try await app.services.audit.chain()
                let projects: [String]
                if let reference = arguments.options["id"] {
                    projects = [try await chainID(app, reference)]
                } else {
                    projects = try await app.services.audit.projects()
                }
                var intact = true
                for project in projects {
                    let report = try await app.services.audit.verify(projectID: project, expected: heads)
                    intact = intact && report.intact
                    printJSON([
                        "projectId": .string(project), "intact": .bool(report.intact), "checked": .int(report.checked),
                        "headSeq": .string(String(report.headSeq)), "pending": .int(report.pending),
                        "problems": .array(report.problems.map { .string($0) }),
                    ])
                }
                return intact ? 0 : 1
            }
        default:
            print(usage)
            return 2
        }
    }

    /// A project's chain by its ID or number; `-` for the deployment's.
    static func chainID(_ app: Application, _ reference: String) async throws -> String {
        if reference == deploymentChain { return reference }
        guard let project = try await app.catalog.project(reference) else { throw CLIError("no project \(reference)") }
        return project.id
    }

    static func json(_ e: AuditEntry) -> JSONValue {
        [
            "projectId": .string(e.projectID), "seq": .string(String(e.seq)), "time": .string(Timestamp.rfc3339(e.at)),
            "timeMicros": .string(String(e.atMicros)), "action": .string(e.action),
            "target": e.target.map { .string($0) } ?? .null, "subject": .bool(e.subject),
            "targetDigest": .string(Hex.encode(e.targetDigest)), "actor": .string(e.actor),
            "requestId": .string(e.requestID), "outcome": .string(e.outcome),
            "previousHash": .string(Hex.encode(e.previousHash)), "hash": .string(Hex.encode(e.hash)),
        ]
    }

    /// The CLI's actor: the operating-system user who ran it.
    static var actor: String {
        "cli:" + (ProcessInfo.processInfo.environment["USER"] ?? ProcessInfo.processInfo.environment["LOGNAME"]
            ?? "uid-\(getuid())")
    }

    /// Appends the entry of a CLI action on `projectID` (run after the action; its outcome is `OK`).
    static func record(_ app: Application, projectID: String, action: String, target: AuditTarget) async throws {
        try await app.services.audit.record(
            projectID: projectID, action: action, target: target, actor: actor,
            requestID: "cli-" + Base64URL.encode(try SecureRandom.bytes(9)), outcome: "OK")
    }
}
