import API
import Foundation
import Glibc

// Thin entry point: parse the command, run it, turn errors into one line and an exit status.
signal(SIGPIPE, SIG_IGN)
let arguments = Array(CommandLine.arguments.dropFirst())
let status = await TokenRegistryCommand.run(arguments)
fflush(nil)
exit(status)
