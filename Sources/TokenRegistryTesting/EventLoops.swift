import HTTP
import Postgres

/// As in the service's composition root: test services put their database connections on their HTTP event loops.
extension EventLoop: PostgresEventLoop {}

extension HTTPServer {
    /// Starts the server, runs `body` with its port, and shuts it down, after a failure too.
    public func serving(_ body: (Int) async throws -> Void) async throws {
        let port = try start()
        do {
            try await body(port)
        } catch {
            await shutdown(drainTimeout: 1)
            throw error
        }
        await shutdown(drainTimeout: 1)
    }
}
