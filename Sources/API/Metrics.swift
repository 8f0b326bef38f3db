import Foundation
import Registry
import Synchronization

/// Request counters and a latency histogram per route template, rendered as Prometheus text.
public final class Metrics: Sendable {
    static let buckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    private struct Key: Hashable {
        let method: String
        let route: String
        let status: Int
    }

    private struct Histogram {
        var counts = [Int](repeating: 0, count: Metrics.buckets.count)
        var sum = 0.0
        var count = 0

        mutating func record(_ seconds: Double) {
            for (i, bound) in Metrics.buckets.enumerated() where seconds <= bound { counts[i] += 1 }
            sum += seconds
            count += 1
        }
    }

    private struct State {
        var requests: [Key: Int] = [:]
        var latency: [String: Histogram] = [:]
        /// By job name (a closed set): units failed on their own rows, and runs in which the job failed whole.
        var jobUnitFailures: [String: Int] = [:]
        var jobFailures: [String: Int] = [:]
        /// Send feedback results by channel and class, and what they did (closed sets).
        var feedbackResults: [String: Int] = [:]
        var feedbackActions: [String: Int] = [:]
        /// When this replica's jobs loop last completed a run (nil: the loop is off here).
        var jobsLoopLastRun: Double?
        /// Audit entries that could not be appended.
        var auditFailures = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// Records one request; `route` is the template, never the raw path (so cardinality stays bounded).
    public func observe(method: String, route: String, status: Int, seconds: Double) {
        state.withLock { s in
            s.requests[Key(method: method, route: route, status: status), default: 0] += 1
            // In place: a copy taken out of the dictionary and written back copied its counts on every request.
            s.latency[route, default: Histogram()].record(seconds)
        }
    }

    /// Counts what a jobs run of this replica could not do.
    public func record(_ report: JobReport) {
        state.withLock { s in
            for (job, count) in report.unitFailures { s.jobUnitFailures[job, default: 0] += count }
            for job in report.failed.keys { s.jobFailures[job, default: 0] += 1 }
            s.jobsLoopLastRun = Date().timeIntervalSince1970
        }
    }

    /// Counts an audit entry that could not be appended (the action's answer stood).
    public func countAuditFailure() { state.withLock { $0.auditFailures += 1 } }

    /// Counts one feedback batch: each result's channel and class, and its action.
    public func record(feedback results: [FeedbackResult], actions: [FeedbackAction]) {
        state.withLock { s in
            for r in results {
                s.feedbackResults["channel=\"\(r.outcome.channel.rawValue)\",class=\"\(r.outcome.feedbackClass.rawValue)\"", default: 0] += 1
            }
            for a in actions { s.feedbackActions[a.rawValue, default: 0] += 1 }
        }
    }

    /// The Prometheus exposition text, followed by `extra` lines (gauges read at scrape time).
    public func render(extra: [String] = []) -> String {
        let snapshot = state.withLock { $0 }
        var out = "# HELP http_requests_total Requests answered, by method, route template and status.\n"
        out += "# TYPE http_requests_total counter\n"
        for (key, value) in snapshot.requests.sorted(by: {
            ($0.key.route, $0.key.method, $0.key.status) < ($1.key.route, $1.key.method, $1.key.status)
        }) {
            out +=
                "http_requests_total{method=\"\(key.method)\",route=\"\(PrometheusText.escape(key.route))\",status=\"\(key.status)\"} \(value)\n"
        }
        out += "# HELP http_request_duration_seconds Time from parsed request to response, by route template.\n"
        out += "# TYPE http_request_duration_seconds histogram\n"
        for (route, h) in snapshot.latency.sorted(by: { $0.key < $1.key }) {
            let label = PrometheusText.escape(route)
            for (i, bound) in Metrics.buckets.enumerated() {
                out += "http_request_duration_seconds_bucket{route=\"\(label)\",le=\"\(bound)\"} \(h.counts[i])\n"
            }
            out += "http_request_duration_seconds_bucket{route=\"\(label)\",le=\"+Inf\"} \(h.count)\n"
            out += "http_request_duration_seconds_sum{route=\"\(label)\"} \(h.sum)\n"
            out += "http_request_duration_seconds_count{route=\"\(label)\"} \(h.count)\n"
        }
        out += "# HELP registry_job_unit_failures_total Units (a delivery, an installation to expire) a job failed on "
        out += "their own rows while it went on, by job (this replica).\n# TYPE registry_job_unit_failures_total counter\n"
        for (job, count) in snapshot.jobUnitFailures.sorted(by: { $0.key < $1.key }) {
            out += "registry_job_unit_failures_total{job=\"\(job)\"} \(count)\n"
        }
        out += "# HELP registry_job_failures_total Jobs runs in which a job failed as a whole, by job (this replica).\n"
        out += "# TYPE registry_job_failures_total counter\n"
        for (job, count) in snapshot.jobFailures.sorted(by: { $0.key < $1.key }) {
            out += "registry_job_failures_total{job=\"\(job)\"} \(count)\n"
        }
        out += "# HELP registry_feedback_results_total Send results received, by channel and outcome class (this replica).\n"
        out += "# TYPE registry_feedback_results_total counter\n"
        for (labels, count) in snapshot.feedbackResults.sorted(by: { $0.key < $1.key }) {
            out += "registry_feedback_results_total{\(labels)} \(count)\n"
        }
        out += "# HELP registry_feedback_actions_total What send results did to registrations, by action (this replica).\n"
        out += "# TYPE registry_feedback_actions_total counter\n"
        for (action, count) in snapshot.feedbackActions.sorted(by: { $0.key < $1.key }) {
            out += "registry_feedback_actions_total{action=\"\(action)\"} \(count)\n"
        }
        out += "# HELP registry_audit_append_failures_total Audit entries that could not be appended (this replica).\n"
        out += "# TYPE registry_audit_append_failures_total counter\n"
        out += "registry_audit_append_failures_total \(snapshot.auditFailures)\n"
        if let last = snapshot.jobsLoopLastRun {
            out += "# HELP registry_jobs_loop_last_run_timestamp_seconds When this replica's jobs loop last completed a run.\n"
            out += "# TYPE registry_jobs_loop_last_run_timestamp_seconds gauge\n"
            out += "registry_jobs_loop_last_run_timestamp_seconds \(last)\n"
        }
        for line in extra { out += line + "\n" }
        return out
    }
}
