import Synchronization

/// Calls under way on this replica, by project and in all: what a project's share of something every tenant shares
/// is bounded by (the change feed's long-polls, the conditions that read a whole project).
final class ProjectCounts: Sendable {
    private let counts = Mutex<(byProject: [String: Int], total: Int)>(([:], 0))

    /// Counts a call of `project` in; false, and not counted, when the project has `limit` under way already.
    func enter(_ project: String, limit: Int = .max) -> Bool {
        counts.withLock {
            guard $0.byProject[project, default: 0] < limit else { return false }
            $0.byProject[project, default: 0] += 1
            $0.total += 1
            return true
        }
    }

    /// Counts a call of `project` out.
    func leave(_ project: String) {
        counts.withLock {
            let left = ($0.byProject[project] ?? 1) - 1
            $0.byProject[project] = left > 0 ? left : nil
            $0.total -= 1
        }
    }

    /// The calls under way of `project`, and of every project.
    func current(_ project: String) -> (project: Int, total: Int) {
        counts.withLock { ($0.byProject[project] ?? 0, $0.total) }
    }

    /// The calls under way of `project`, and how many projects have calls under way.
    func share(_ project: String) -> (project: Int, projects: Int) {
        counts.withLock { ($0.byProject[project] ?? 0, $0.byProject.count) }
    }

    var total: Int { counts.withLock { $0.total } }
}
