import Foundation
import Glibc

extension String {
    fileprivate func replacingOccurrences(of a: String, with b: String) -> String {
        components(separatedBy: a).joined(separator: b)
    }
}

/// The real `token-registry` binary run as a child process, for tests of signals, start-up and outages.
public final class ServiceProcess: @unchecked Sendable {
    // @unchecked Sendable: `process` is only started, signalled and waited on; Foundation's Process is thread-safe
    // for those calls.
    public let process: Process
    public let port: Int
    /// The address the service is reached at (its `HOST`, or 127.0.0.1 for a wildcard).
    public let host: String
    public let logPath: String

    /// The repository root, found from this file's path.
    public static var repositoryRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
    }

    /// The debug build of the binary, which `swift build --build-tests` makes.
    public static var binary: String { repositoryRoot.appendingPathComponent(".build/debug/token-registry").path }

    public static var isAvailable: Bool {
        TestDatabase.isCI || (FileManager.default.isExecutableFile(atPath: binary) && TestDatabase.isAvailable)
    }

    /// A port that was free a moment ago.
    public static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Runs a one-shot command of the binary (`project create …`) and returns its standard output.
    public static func command(_ arguments: [String], environment: [String: String]) async throws -> String {
        let quoted = ([binary] + arguments).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        return try await shell(quoted.joined(separator: " "), environment: environment)
    }

    /// Starts `token-registry serve` on a free port with `environment` added.
    public init(environment: [String: String]) throws {
        port = ServiceProcess.freePort()
        logPath = NSTemporaryDirectory() + "token-registry-\(UUID().uuidString).log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        process = Process()
        process.executableURL = URL(fileURLWithPath: ServiceProcess.binary)
        process.arguments = ["serve"]
        var env = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        env["PORT"] = String(port)
        // 127.0.0.1 unless the test chose a listen address; readiness is then asked there.
        host = environment["HOST"].map { ["", "0.0.0.0", "::"].contains($0) ? "127.0.0.1" : $0 } ?? "127.0.0.1"
        env["HOST"] = environment["HOST"] ?? "127.0.0.1"
        process.environment = env
        let log = FileHandle(forWritingAtPath: logPath)
        process.standardOutput = log
        process.standardError = log
        try process.run()
    }

    /// Waits until `GET /readyz` answers `status`, or fails after `timeout` seconds.
    public func waitForReadiness(_ status: Int = 200, timeout: Double = 30) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let reply = try? await RawHTTPClient.exchange(
                port: port, host: host, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
                reply.status == status
            {
                return
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw POSIXError(.ETIMEDOUT)
    }

    public func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Waits for the process to exit and returns its status.
    public func waitForExit(timeout: Double = 30) async throws -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning {
            guard Date() < deadline else {
                signal(SIGKILL)
                throw POSIXError(.ETIMEDOUT)
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        return process.terminationStatus
    }

    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

/// Runs a shell command (for test fixtures such as a private PostgreSQL cluster) and returns its standard output.
///
/// Uses `posix_spawn` and `waitpid` on a thread of its own, with output going to a file: a child that leaves a
/// server running (pg_ctl) would otherwise hold a pipe open, and Foundation's `waitUntilExit` can hang off the
/// main thread.
@discardableResult
public func shell(_ command: String, environment: [String: String] = [:]) async throws -> String {
    try await offPool {
        let output = NSTemporaryDirectory() + "tr-shell-\(UUID().uuidString)"
        defer { unlink(output) }
        let script = "cd '\(ServiceProcess.repositoryRoot.path)' && ( \(command) ) >'\(output)' 2>/dev/null"
        let env = ProcessInfo.processInfo.environment.merging(environment) { $1 }.map { "\($0.key)=\($0.value)" }
        let words: [String] = ["/bin/bash", "-c", script]
        let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = env.map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, "/bin/bash", nil, nil, argv, envp) == 0 else { throw POSIXError(.EIO) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        guard status == 0 else { throw ShellError(command: command, status: status, output: text) }
        return text
    }
}

public struct ShellError: Error, CustomStringConvertible {
    public let command: String
    public let status: Int32
    public let output: String
    public var description: String { "`\(command)` failed (\(status)): \(output)" }
}
