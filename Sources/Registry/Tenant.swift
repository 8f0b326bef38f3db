/// The project the current task works for: the API sets it around each request's handler once the caller is known,
/// and the PostgreSQL stores count the connections the task holds against that project's share of the pool
/// (`DB_POOL_PROJECT_SHARE`), so one project's requests queued on its own row locks, each holding a connection until
/// its lock or its statement time-out, hold that project's share and never the whole pool (docs/security.md, class
/// 27). Jobs, and what runs before a caller is known (its credential's look-up), count for no project.
public enum Tenant {
    @TaskLocal public static var current: String?
}
