import API
import Foundation
import JSON
import Registry
import Testing
import TokenRegistryTesting

/// What an operator watches: W3C trace context through a request into the deletion notices it causes, and the
/// gauges the alerts read (docs/operations.md, "Alerts, dashboard and runbook").
@Suite("Trace context and the alerts' gauges")
struct ObservabilityTests {
    @Test func traceparentIsParsedByTheRecommendation() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        let kept = TraceContext.of(valid)
        #expect(kept.traceID == "4bf92f3577b34da6a3ce929d0e0e4736" && kept.flags == "01")
        #expect(kept.spanID != "00f067aa0ba902b7" && kept.spanID.count == 16)
        #expect(kept.header == "00-4bf92f3577b34da6a3ce929d0e0e4736-\(kept.spanID)-01")
        // Only the sampled flag is passed on.
        #expect(TraceContext.of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03").flags == "01")
        #expect(TraceContext.of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-fe").flags == "00")
        // A later version: its first fields, when what follows starts with a dash.
        #expect(TraceContext.of("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next").traceID
            == "4bf92f3577b34da6a3ce929d0e0e4736")
        let invalid = [
            "", "00", valid.uppercased(), "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", valid + "-x", valid + "x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ]
        for header in invalid {
            let made = TraceContext.of(header)
            #expect(made.traceID != "4bf92f3577b34da6a3ce929d0e0e4736", "\(header)")
            #expect(made.traceID.count == 32 && made.flags == "00", "\(header)")
            #expect(made.traceID.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) })
        }
    }

    /// A request's trace is answered, logged, and passed on in the notices of the deletion it asked for.
    @Test func aTraceFollowsADeletionIntoItsNotices() async throws {
        try await InProcessService.with { s in
            let base = "/v1/projects/\(s.project.id)"
            _ = try await s.request(
                "POST", "\(base)/linkedServices", headers: s.serverHeaders,
                json: ["name": "crm", "endpoint": "https://crm.example/hook"])
            let i = try await s.createInstallation()
            let caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            let deleted = try await s.request(
                "DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)",
                headers: s.serverHeaders.merging(["traceparent": caller]) { a, _ in a })
            #expect(deleted.status == 200)
            let answered = try #require(deleted.header("traceparent"))
            #expect(answered.hasPrefix("00-0af7651916cd43dd8448eb211c80319c-") && answered.hasSuffix("-01"), "\(answered)")
            #expect(answered != caller)
            _ = try await s.app.jobs.deliverDue()
            let notice = try #require(s.transport.sent.last)
            let passed = notice.headers.first { $0.0 == "traceparent" }?.1
            #expect(passed == answered, "\(notice.headers)")
            // Without one, a trace of its own, answered all the same.
            let plain = try await s.request("GET", "/healthz")
            #expect(plain.header("traceparent")?.count == 55)
        }
    }

    @Test func theAlertsGaugesAreExported() async throws {
        try await InProcessService.with { s in
            _ = try await s.registered(count: 2)
            let text = try await s.request("GET", "/metrics").text
            for line in [
                "registry_ready 1", "registry_event_outbox_rows ", "registry_event_outbox_oldest_seconds ",
                "registry_signing_key_age_seconds ", "registry_registrations{freshness=\"fresh\"} 2",
                "registry_registrations{freshness=\"retired\"} 0",
            ] {
                #expect(text.contains(line), "\(line) is not in the scrape")
            }
        }
    }

    /// The scrape is valid text format whatever the service holds: each metric's samples form one group right after
    /// its own `# TYPE` (a histogram's `_bucket`, `_sum` and `_count` in its group), and no name has two groups. (The
    /// delivery counters and the jobs' gauges were interleaved two by two, which strict parsers refuse.)
    @Test func everyMetricsSamplesFormOneGroupAfterItsType() async throws {
        try await InProcessService.with { s in
            let base = "/v1/projects/\(s.project.id)"
            for name in ["crm", "mail"] {
                _ = try await s.request(
                    "POST", "\(base)/linkedServices", headers: s.serverHeaders,
                    json: ["name": .string(name), "endpoint": "https://crm.example/hook"])
            }
            let i = try await s.createInstallation()
            _ = try await s.request("DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)", headers: s.serverHeaders)
            _ = try await s.app.jobs.runAll()
            _ = try await s.request("GET", "/healthz")
            let text = try await s.request("GET", "/metrics").text
            var typed: [String: String] = [:]
            var current: String?
            var closed: Set<String> = []
            for line in text.split(separator: "\n").map(String.init) where !line.isEmpty {
                if line.hasPrefix("# TYPE ") {
                    let parts = line.split(separator: " ")
                    let name = String(parts[2])
                    #expect(typed[name] == nil && !closed.contains(name), "\(name) has two groups")
                    if let current { closed.insert(current) }
                    typed[name] = String(parts[3])
                    current = name
                    continue
                }
                if line.hasPrefix("#") { continue }
                let name = String(line.prefix { $0 != "{" && $0 != " " })
                let family = typed[name] != nil ? name : ["_bucket", "_sum", "_count"].compactMap { suffix in
                    name.hasSuffix(suffix) ? String(name.dropLast(suffix.count)) : nil
                }.first { typed[$0] != nil } ?? name
                #expect(family == current, "\(name) is outside its group (in \(current ?? "none"))")
            }
            #expect(typed["registry_delivery_attempts_total"] == "counter")
            #expect(text.contains("registry_job_duration_seconds{"))
        }
    }
}
