import Dispatch
import Foundation
import Glibc

/// Runs a helper program (`initdb`, `pg_ctl`, `runuser`) to completion without Foundation's `Process`: spawned with
/// `posix_spawn`, reaped with `waitpid`, bounded by a time limit, its output kept in a temporary file (a pipe could
/// fill, or be inherited and held open by a server the helper starts). The wait runs on a Dispatch thread, never on
/// the cooperative pool.
enum ChildProcess {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Runs `executable` with `arguments`.
    ///
    /// - Parameter keepOutput: false sends the output to `/dev/null` (for a program that leaves a daemon behind,
    ///   which would otherwise keep writing to the file).
    /// - Returns: the exit status and what it printed on standard output and error.
    /// - Throws: ``Failure`` when it cannot be started or outlives `timeout` (it is then killed).
    static func run(_ executable: String, _ arguments: [String], timeout: Duration, keepOutput: Bool = true)
        async throws -> (status: Int32, output: String)
    {
        try await withCheckedThrowingContinuation { continuation in
            // A queue of its own: the wait blocks its thread (docs/security.md, class 16).
            DispatchQueue(label: "child-process").async {
                continuation.resume(
                    with: Result {
                        try runBlocking(executable, arguments, timeout: timeout, keepOutput: keepOutput)
                    })
            }
        }
    }

    private static func runBlocking(_ executable: String, _ arguments: [String], timeout: Duration, keepOutput: Bool)
        throws -> (status: Int32, output: String)
    {
        var template = Array("/tmp/token-registry-child-XXXXXX".utf8CString)
        let outputFD = keepOutput ? mkstemp(&template) : open("/dev/null", O_WRONLY)
        guard outputFD >= 0 else { throw Failure(description: "cannot create an output file: errno \(errno)") }
        let outputPath =
            keepOutput
            ? String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
        defer {
            close(outputFD)
            if let outputPath { unlink(outputPath) }
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, outputFD, 1)
        posix_spawn_file_actions_adddup2(&actions, outputFD, 2)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard spawned == 0 else {
            throw Failure(description: "cannot start \(executable): \(String(cString: strerror(spawned)))")
        }
        let deadline = ContinuousClock.now + timeout
        var status: Int32 = 0
        while true {
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == pid { break }
            if reaped < 0 && errno != EINTR { throw Failure(description: "waitpid: errno \(errno)") }
            if ContinuousClock.now >= deadline {
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                throw Failure(
                    description: "\(executable) did not finish within \(timeout): \(read(outputPath).suffix(2000))")
            }
            usleep(10_000)
        }
        // WIFEXITED / WEXITSTATUS, which Swift does not import as functions.
        let exited = status & 0x7f == 0
        return (exited ? (status >> 8) & 0xff : 128 + (status & 0x7f), read(outputPath))
    }

    private static func read(_ path: String?) -> String {
        guard let path, let data = FileManager.default.contents(atPath: path) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }
}
