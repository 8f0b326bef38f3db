import Registry

/// The gauges read at scrape time, as Prometheus exposition lines. The domain and the stores hand over numbers;
/// only this file knows the text format.
enum PrometheusText {
    static func serverGauges(
        open: Int, inFlight: Int, refused: Int, pendingOutput: Int, reservedInput: Int, writeTimeouts: Int,
        protocolErrors: [Int: Int]
    ) -> [String] {
        var lines = [
            "# HELP http_large_request_bytes Bytes reserved by requests over 64 KiB on their way in (the input budget).",
            "# TYPE http_large_request_bytes gauge", "http_large_request_bytes \(reservedInput)",
            "# HELP http_pending_output_bytes Answers written and not yet sent, over every connection.",
            "# TYPE http_pending_output_bytes gauge", "http_pending_output_bytes \(pendingOutput)",
            "# HELP http_write_timeouts_total Connections closed because their client did not read in time.",
            "# TYPE http_write_timeouts_total counter", "http_write_timeouts_total \(writeTimeouts)",
            "# HELP http_open_connections Client connections open now.", "# TYPE http_open_connections gauge",
            "http_open_connections \(open)",
            "# HELP http_in_flight_requests Requests being handled now.", "# TYPE http_in_flight_requests gauge",
            "http_in_flight_requests \(inFlight)",
            "# HELP http_refused_connections_total Connections refused at the connection limit.",
            "# TYPE http_refused_connections_total counter",
            "http_refused_connections_total \(refused)",
            "# HELP http_protocol_errors_total Requests rejected by the HTTP parser, by status.",
            "# TYPE http_protocol_errors_total counter",
        ]
        for (status, count) in protocolErrors.sorted(by: { $0.key < $1.key }) {
            lines.append("http_protocol_errors_total{status=\"\(status)\"} \(count)")
        }
        return lines
    }

    static func storeStatistics(_ s: StoreStatistics) -> [String] {
        var lines = [
            "# HELP db_pool_connections Database connections by state.", "# TYPE db_pool_connections gauge",
            "db_pool_connections{state=\"in_use\"} \(s.inUse)", "db_pool_connections{state=\"idle\"} \(s.idle)",
            "# HELP db_pool_waiting Requests waiting for a database connection.", "# TYPE db_pool_waiting gauge",
            "db_pool_waiting \(s.waiting)",
            "# HELP db_group_commit_queued_writes Writes waiting for a group commit.",
            "# TYPE db_group_commit_queued_writes gauge", "db_group_commit_queued_writes \(s.queuedWrites)",
            "# HELP db_group_commit_transactions_total Transactions run by group commit (a batch, or a write retried alone).",
            "# TYPE db_group_commit_transactions_total counter", "db_group_commit_transactions_total \(s.groupCommits)",
            "# HELP db_group_commit_writes_total Writes committed in group commit's batches (÷ transactions: the mean batch).",
            "# TYPE db_group_commit_writes_total counter", "db_group_commit_writes_total \(s.groupCommittedWrites)",
            "# HELP db_group_commit_retried_alone_total Writes run again alone after another write failed their batch.",
            "# TYPE db_group_commit_retried_alone_total counter",
            "db_group_commit_retried_alone_total \(s.writesRetriedAlone)",
            "# HELP db_group_commit_lock_waits_alone_total Writes that waited for a lock longer than a batch may and ran alone.",
            "# TYPE db_group_commit_lock_waits_alone_total counter",
            "db_group_commit_lock_waits_alone_total \(s.writesLockWaitedAlone)",
            "# HELP db_read_batch_queued_reads Point reads waiting for a batch.",
            "# TYPE db_read_batch_queued_reads gauge", "db_read_batch_queued_reads \(s.queuedReads)",
            "# HELP db_read_batches_total Round trips of batched point reads.",
            "# TYPE db_read_batches_total counter", "db_read_batches_total \(s.readBatches)",
            "# HELP db_read_batch_reads_total Point reads answered in batches (÷ batches: the mean batch).",
            "# TYPE db_read_batch_reads_total counter", "db_read_batch_reads_total \(s.batchedReads)",
            "# HELP db_read_batch_ran_alone_total Reads that waited too long for a batch (one held up) and ran alone.",
            "# TYPE db_read_batch_ran_alone_total counter", "db_read_batch_ran_alone_total \(s.readsRunAlone)",
        ]
        if let replica = s.replica {
            lines += [
                "# HELP db_replica_pool_connections Read replica connections (DATABASE_READ_URL) by state.",
                "# TYPE db_replica_pool_connections gauge",
                "db_replica_pool_connections{state=\"in_use\"} \(replica.inUse)",
                "db_replica_pool_connections{state=\"idle\"} \(replica.idle)",
                "# HELP db_replica_pool_waiting Requests waiting for a read replica connection.",
                "# TYPE db_replica_pool_waiting gauge", "db_replica_pool_waiting \(replica.waiting)",
            ]
        }
        return lines
    }

    /// Whether this replica serves: not draining, the database reachable, the schema current (what `/readyz` says).
    static func ready(_ ready: Bool) -> [String] {
        [
            "# HELP registry_ready 1 when this replica is ready to serve (its /readyz answers 200), else 0.",
            "# TYPE registry_ready gauge", "registry_ready \(ready ? 1 : 0)",
        ]
    }

    /// Registrations by freshness (counted at most every few minutes: a count over the table).
    static func registrations(_ counts: [String: Int]) -> [String] {
        var lines = [
            "# HELP registry_registrations Registrations by freshness: fresh, stale (still targeted), expired (no longer targeted), disabled (consent withdrawn), retired (send feedback).",
            "# TYPE registry_registrations gauge",
        ]
        for (name, count) in counts.sorted(by: { $0.key < $1.key }) {
            lines.append("registry_registrations{freshness=\"\(name)\"} \(count)")
        }
        return lines
    }

    static func registryGauges(_ gauges: RegistryGauges) -> [String] {
        var lines = ["# HELP registry_deletions Deletions by state.", "# TYPE registry_deletions gauge"]
        for state in [ReceiptState.pending, .done, .overdue] {
            lines.append("registry_deletions{state=\"\(state.rawValue)\"} \(gauges.deletions[state] ?? 0)")
        }
        lines += [
            "# HELP registry_oldest_undelivered_deletion_seconds Age of the oldest deletion not yet acknowledged by every service.",
            "# TYPE registry_oldest_undelivered_deletion_seconds gauge",
            "registry_oldest_undelivered_deletion_seconds \(gauges.oldestUndeliveredSeconds)",
        ]
        // Each metric's samples as one group after its own HELP and TYPE, as the text format requires.
        func serviceLabels(_ service: RegistryGauges.ServiceCounters) -> String {
            "project=\"\(escape(service.projectID))\",service=\"\(escape(service.service))\""
        }
        lines += [
            "# HELP registry_delivery_attempts_total Deletion delivery attempts per linked service.",
            "# TYPE registry_delivery_attempts_total counter",
        ]
        for service in gauges.services {
            lines.append("registry_delivery_attempts_total{\(serviceLabels(service))} \(service.attempts)")
        }
        lines += [
            "# HELP registry_delivery_failures_total Failed deletion delivery attempts per linked service.",
            "# TYPE registry_delivery_failures_total counter",
        ]
        for service in gauges.services {
            lines.append("registry_delivery_failures_total{\(serviceLabels(service))} \(service.failures)")
        }
        lines += [
            "# HELP registry_event_outbox_rows Change-feed events the relay has not moved yet.",
            "# TYPE registry_event_outbox_rows gauge", "registry_event_outbox_rows \(gauges.outboxRows)",
            "# HELP registry_event_outbox_oldest_seconds Age of the oldest change-feed event the relay has not moved yet.",
            "# TYPE registry_event_outbox_oldest_seconds gauge",
            "registry_event_outbox_oldest_seconds \(gauges.outboxOldestSeconds)",
        ]
        if let age = gauges.signingKeyAgeSeconds {
            lines += [
                "# HELP registry_signing_key_age_seconds Age of the newest key that signs installation auth tokens.",
                "# TYPE registry_signing_key_age_seconds gauge", "registry_signing_key_age_seconds \(age)",
            ]
        }
        lines += [
            "# HELP registry_feedback_breaker_tripped Send feedback's breaker is tripped for this project and channel: its retirements turned into quarantine until an operator clears it.",
            "# TYPE registry_feedback_breaker_tripped gauge",
        ]
        for breaker in gauges.trippedBreakers {
            lines.append(
                "registry_feedback_breaker_tripped{project=\"\(escape(breaker.projectID))\",channel=\"\(escape(breaker.channel))\"} 1")
        }
        lines += [
            "# HELP registry_job_last_run_timestamp_seconds When each job last ran.",
            "# TYPE registry_job_last_run_timestamp_seconds gauge",
        ]
        for run in gauges.jobs {
            lines.append(
                "registry_job_last_run_timestamp_seconds{job=\"\(escape(run.job))\"} \(Int64(run.lastRun.timeIntervalSince1970))"
            )
        }
        lines += [
            "# HELP registry_job_duration_seconds How long each job's last run took.",
            "# TYPE registry_job_duration_seconds gauge",
        ]
        for run in gauges.jobs {
            lines.append("registry_job_duration_seconds{job=\"\(escape(run.job))\"} \(run.durationSeconds)")
        }
        return lines
    }

    static func clockSkew(_ seconds: Double) -> [String] {
        [
            "# HELP registry_clock_skew_seconds This replica's clock minus the database's; beyond 60 s in either direction the destructive jobs (expiry, purge) do not run here.",
            "# TYPE registry_clock_skew_seconds gauge",
            "registry_clock_skew_seconds \(seconds)",
        ]
    }

    /// A label value with `\`, `"` and newlines escaped, as the exposition format requires.
    static func escape(_ value: String) -> String {
        var out = ""
        for c in value {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
        return out
    }
}
