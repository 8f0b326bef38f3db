import API
import Crypto
import Foundation
import JSON
import Registry

/// `token-registry import` and `token-registry export`: moving to TokenRegistry, and away from it (README).
enum ImportCommand {
    static let usage = """
        token-registry import --project <id|number> --format <format> <FILE|-> [--dry-run] [--rejected <file>]
          Imports the devices of another service's export: onesignal-csv, fcm-django, push-notifications, sns,
          pinpoint, or registry (this service's own export). Rows are merged in batches of 5000 by the refresh rules
          (the newer wins; a deleted installation never comes back); a re-run of the same file changes nothing, and a
          run killed midway resumes after its last committed batch. Rejected rows go to <FILE>.rejected.jsonl (or
          --rejected), each with its line and the reason; they never stop the import. --dry-run prints what would
          change and changes nothing. Progress on standard error: a bar on a terminal, a line every 5 s otherwise.
        token-registry export --project <id|number>
          Writes every installation of the project as JSON lines (format tokenregistry.export/1, tokens in clear) to
          standard output: what `import --format registry` reads.
        """

    static func importing(_ arguments: Arguments) async throws -> Int32 {
        guard !arguments.wantsHelp, let path = arguments.words.first else {
            print(usage)
            return arguments.wantsHelp ? 0 : 2
        }
        try arguments.allow(["project", "format", "rejected"])
        guard let format = ImportFormat(rawValue: try arguments.required("format")) else {
            throw CLIError("--format must be one of \(ImportFormat.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let dryRun = arguments.flags.contains("dry-run")
        let handle: FileHandle
        var key: String?
        if path == "-" {
            handle = FileHandle.standardInput
        } else {
            guard let file = FileHandle(forReadingAtPath: path) else { throw CLIError("cannot read \(path)") }
            handle = file
            key = try runKey(path: path, format: format)
        }
        let rejectedPath = arguments.options["rejected"] ?? (path == "-" ? "import.rejected.jsonl" : path + ".rejected.jsonl")
        let total = path == "-" ? nil : (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? nil
        return try await Admin.withApplication { app in
            guard let project = try await app.catalog.project(try arguments.required("project")) else {
                throw CLIError("no project \(arguments.options["project"] ?? "")")
            }
            let apps = try await app.catalog.apps(projectID: project.id)
            let rejections = RejectionFile(path: rejectedPath)
            let bytes = SourceBytes(handle)
            var reader = SourceFormats.reader(format, bytes)
            let meter = ProgressMeter(total: total)
            let started = Date()
            let result = try await app.services.imports.run(
                project: project, apps: apps, format: format, reader: &reader, key: key, dryRun: dryRun,
                bytes: { bytes.consumed }, progress: { meter.show($0) }, rejected: { rejections.write($0) })
            meter.done(result)
            rejections.close()
            let seconds = Date().timeIntervalSince(started)
            let c = result.counts
            printJSON([
                "projectId": .string(project.id), "format": .string(format.rawValue), "dryRun": .bool(dryRun),
                "rows": .int(result.rows), "imported": .int(result.imported), "rejected": .int(result.rejected),
                "skipped": .int(result.skipped), "seconds": .number(String(format: "%.2f", seconds)),
                "installationsCreated": .int(c.installationsCreated), "installationsUpdated": .int(c.installationsUpdated),
                "registrationsWritten": .int(c.registrationsWritten), "consentChanges": .int(c.consentChanges),
                "topicsAdded": .int(c.topicsAdded), "usersBound": .int(c.usersBound),
                "deletedSkipped": .int(c.deletedSkipped), "olderThanStored": .int(c.olderThanStored),
                "rejectedFile": result.rejected > 0 ? .string(rejectedPath) : .null,
            ])
            if !dryRun {
                try await AuditCommand.record(
                    app, projectID: project.id, action: "projects.import",
                    target: .resource("imports/\(format.rawValue)/" + (key.map { String($0.prefix(16)) } ?? "stdin")))
            }
            return 0
        }
    }

    /// A run is named by its format and a hash of its file's bytes (SHA-256 chained over 4 MiB chunks), so the same
    /// file resumes (or re-runs) as itself.
    static func runKey(path: String, format: ImportFormat) throws -> String {
        guard let file = FileHandle(forReadingAtPath: path) else { throw CLIError("cannot read \(path)") }
        defer { try? file.close() }
        var digest = SHA256.hash(format.rawValue)
        while true {
            let chunk = file.readData(ofLength: 4 << 20)
            if chunk.isEmpty { break }
            digest = SHA256.hash(digest + SHA256.hash([UInt8](chunk)))
        }
        return format.rawValue + ":" + Hex.encode(digest)
    }

    static func exporting(_ arguments: Arguments) async throws -> Int32 {
        guard !arguments.wantsHelp else {
            print(usage)
            return 0
        }
        try arguments.allow(["project"])
        return try await Admin.withApplication { app in
            guard let project = try await app.catalog.project(try arguments.required("project")) else {
                throw CLIError("no project \(arguments.options["project"] ?? "")")
            }
            let out = FileHandle.standardOutput
            out.write(Data(RegistryExportFormat.header(projectID: project.id).encoded() + [10]))
            var buffer: [UInt8] = []
            try await app.services.imports.export(project: project) { bytes in
                buffer += bytes
                if buffer.count > 1 << 20 {
                    out.write(Data(buffer))
                    buffer.removeAll(keepingCapacity: true)
                }
            }
            out.write(Data(buffer))
            try await AuditCommand.record(app, projectID: project.id, action: "projects.export", target: .resource("project"))
            return 0
        }
    }
}

/// Rejected rows, one JSON object a line (`line`, `reason`), written as they come.
final class RejectionFile {
    let path: String
    private var handle: FileHandle?

    init(path: String) { self.path = path }

    func write(_ r: ImportRejection) {
        if handle == nil {
            _ = FileManager.default.createFile(atPath: path, contents: nil)
            handle = FileHandle(forWritingAtPath: path)
        }
        handle?.write(Data(JSONValue.object([("line", .int(r.line)), ("reason", .string(r.reason))]).encoded() + [10]))
    }

    func close() { try? handle?.close() }
}

/// Progress on standard error: a bar redrawn in place on a terminal (rows, rows a second, ETA from the bytes read,
/// rejected), a plain line every 5 s otherwise.
final class ProgressMeter {
    let total: Int?
    let terminal = isatty(2) == 1
    let started = Date()
    var last = Date(timeIntervalSince1970: 0)

    init(total: Int?) { self.total = total }

    func show(_ p: ImportProgress) {
        let now = Date()
        guard now.timeIntervalSince(last) >= (terminal ? 0.2 : 5) else { return }
        last = now
        let elapsed = max(now.timeIntervalSince(started), 0.001)
        let rate = Double(p.rows) / elapsed
        var eta = ""
        if let total, total > 0, p.bytes > 0 {
            let left = Double(total - p.bytes) / (Double(p.bytes) / elapsed)
            eta = String(format: " ETA %.0fs", max(0, left))
        }
        if terminal, let total, total > 0 {
            let share = min(1, Double(p.bytes) / Double(total))
            let width = 30
            let filled = Int(share * Double(width))
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            FileHandle.standardError.write(
                Data(String(format: "\r[%@] %3.0f%% %d rows %.0f rows/s%@ %d rejected ", bar, share * 100, p.rows, rate, eta, p.rejected).utf8))
        } else {
            FileHandle.standardError.write(
                Data(String(format: "import: %d rows, %.0f rows/s%@, %d rejected\n", p.rows, rate, eta, p.rejected).utf8))
        }
    }

    func done(_ p: ImportProgress) {
        last = Date(timeIntervalSince1970: 0)
        show(p)
        if terminal { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}
