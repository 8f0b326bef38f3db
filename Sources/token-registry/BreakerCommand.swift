import API
import Foundation
import JSON
import Registry

/// `token-registry breaker`: the operator's side of send feedback's breaker (docs/feedback.md).
enum BreakerCommand {
    static let usage = """
        token-registry breaker status --id <project id|number>
          Prints each channel's breaker: tripped or clear, and what tripped it.
        token-registry breaker clear --id <project id|number> --channel fcm|apns|webpush [--confirm]
          Clears a tripped breaker. Without --confirm what it held in quarantine is released (the sender's setup was
          at fault); with --confirm it is retired (the tokens were dead). The window starts again either way.
        """

    static func run(_ arguments: Arguments) async throws -> Int32 {
        guard !arguments.wantsHelp, let verb = arguments.words.first else {
            print(usage)
            return arguments.wantsHelp ? 0 : 2
        }
        switch verb {
        case "status":
            try arguments.allow(["id"])
            return try await Admin.withProject(arguments) { app, project in
                let report = try await app.feedback.report(project: project)
                printJSON([
                    "projectId": .string(project.id),
                    "breakers": .array(
                        report.breakers.map {
                            [
                                "channel": .string($0.channel.rawValue), "state": $0.tripped ? "tripped" : "clear",
                                "failing": .int(Int64($0.failing)), "results": .int(Int64($0.results)),
                            ]
                        }),
                ])
                return 0
            }
        case "clear":
            try arguments.allow(["id", "channel"])
            let name = try arguments.required("channel")
            guard let channel = FeedbackChannel(rawValue: name) else {
                throw CLIError("--channel must be fcm, apns or webpush")
            }
            return try await Admin.withProject(arguments) { app, project in
                let cleared = try await app.feedback.clearBreaker(
                    project: project, channel: channel, confirm: arguments.flags.contains("confirm"))
                try await AuditCommand.record(
                    app, projectID: project.id, action: "hygiene.clearBreaker",
                    target: .resource("hygiene/breakers/" + channel.rawValue))
                printJSON([
                    "projectId": .string(project.id), "channel": .string(channel.rawValue), "state": "clear",
                    "released": .int(Int64(cleared.released)), "retired": .int(Int64(cleared.retired)),
                ])
                return 0
            }
        default:
            print(usage)
            return 2
        }
    }
}
