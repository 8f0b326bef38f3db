import Foundation
import JSON

/// Delivers due deletion notices to linked services: each claimed under a lease, signed, posted, and its outcome
/// recorded (2xx confirms, 202 waits for an acknowledgement, anything else retries with back-off and jitter).
public struct DeliveryJob: Sendable {
    let store: any DeliveryStore
    let transport: any DeliveryTransport
    let policy: DeletionPolicy
    let clock: JobClock
    /// Notices in flight at once.
    static let parallelism = 16

    /// What a delivery run did: notices attempted, and attempts that failed on our side (a secret that does not
    /// open, an outcome that could not be recorded), each recorded on its own delivery while the rest went on.
    public struct Outcome: Sendable, Equatable {
        public var attempted = 0
        public var failed = 0
    }

    /// Delivers up to `batch` due notices.
    ///
    /// - Returns: how many were attempted.
    public func run(batch: Int = 50) async throws -> Int { try await runBatch(batch).attempted }

    /// Delivers up to `batch` due notices, at most ``DeletionPolicy/deliveriesPerProject`` of one project, and waits
    /// for them all. One delivery that fails never stops the others.
    public func runBatch(_ batch: Int = 50) async throws -> Outcome {
        let now = try await clock.now()
        let claimed = try await store.claimDue(
            at: now, leaseUntil: now.addingTimeInterval(policy.lease), limit: batch, perProject: perProject,
            excluding: [])
        var outcome = Outcome(attempted: claimed.count)
        await withTaskGroup(of: Bool.self) { group in
            for (index, item) in claimed.enumerated() {
                if index >= DeliveryJob.parallelism, await group.next() == false { outcome.failed += 1 }
                group.addTask { await deliver(item) }
            }
            for await delivered in group where !delivered { outcome.failed += 1 }
        }
        return outcome
    }

    private var perProject: Int { max(1, policy.deliveriesPerProject) }

    /// Delivers due notices until none is left or the policy's ``DeletionPolicy/deliveryRunBudget`` has passed, so a
    /// burst of deletions is fanned out within the run instead of `batch` notices per jobs interval.
    ///
    /// A sliding window, not batches: ``parallelism`` notices in flight, and each that finishes makes room for the
    /// next claim, so a slow endpoint holds only its own slot. A project has at most
    /// ``DeletionPolicy/deliveriesPerProject`` in flight: one with notices in flight is left out of the next claims
    /// until they finish, so one project's backlog, or its endpoints that never answer, cannot take the window.
    ///
    /// - Returns: how many were attempted, and how many of those failed on our side.
    public func drain(batch: Int = 50) async throws -> Outcome {
        let budget = Duration.milliseconds(Int64(policy.deliveryRunBudget * 1000))
        let started = ContinuousClock.now
        var total = Outcome()
        var inFlight: [String: Int] = [:]
        var running = 0
        var exhausted = false
        // Whether a claim may find anything the last one did not: it filled its room, or a project left the window.
        var mayFindMore = true
        try await withThrowingTaskGroup(of: (project: String, delivered: Bool).self) { group in
            while true {
                let room = min(batch, DeliveryJob.parallelism) - running
                if !exhausted, mayFindMore, room > 0, ContinuousClock.now - started < budget, !Task.isCancelled {
                    let now = try await clock.now()
                    let claimed = try await store.claimDue(
                        at: now, leaseUntil: now.addingTimeInterval(policy.lease), limit: room, perProject: perProject,
                        excluding: Set(inFlight.keys))
                    // Nothing due outside the projects in flight: claim again only when one of them is done.
                    if claimed.isEmpty && inFlight.isEmpty { exhausted = true }
                    mayFindMore = claimed.count == room
                    for item in claimed {
                        inFlight[item.projectID, default: 0] += 1
                        running += 1
                        group.addTask { (item.projectID, await deliver(item)) }
                    }
                    total.attempted += claimed.count
                }
                guard running > 0, let finished = try await group.next() else { return }
                running -= 1
                if !finished.delivered { total.failed += 1 }
                inFlight[finished.project, default: 1] -= 1
                if inFlight[finished.project] == 0 {
                    inFlight[finished.project] = nil
                    mayFindMore = true
                }
            }
        }
        return total
    }

    /// The notice's body, the same on every attempt (its `deliveryId` lets the service deduplicate).
    public static func body(_ item: ClaimedDelivery) -> [UInt8] {
        let body: JSONValue = [
            "type": .string(EventType.installationDeleted.rawValue), "project": .string(item.projectID),
            "fid": .string(item.fid), "reason": .string(item.reason.rawValue),
            "requestTime": .string(Timestamp.rfc3339(item.requestedAt)),
            "deadline": .string(Timestamp.rfc3339(item.deadline)), "deliveryId": .string(item.deliveryID),
        ]
        return body.encoded()
    }

    /// Sends one notice and records what came of it; false when the attempt failed on our side (recorded on the
    /// delivery when the store can be reached; otherwise its lease runs out and another run retries it).
    private func deliver(_ item: ClaimedDelivery) async -> Bool {
        do {
            if let problem = item.unsendable {
                let now = try await clock.now()
                try await store.record(
                    item,
                    outcome: .failed(
                        reason: String(problem.prefix(500)),
                        retryAt: now.addingTimeInterval(policy.backoff(afterAttempts: item.attempts))),
                    at: now)
                return false
            }
            let body = DeliveryJob.body(item)
            // The signature's time is the wall clock's: the receiver checks it against its own.
            let timestamp = DeletionService.wallClockSeconds()
            var headers = [
                ("Content-Type", "application/json"),
                ("Registry-Signature", WebhookSignature.header(secrets: item.secrets, timestamp: timestamp, body: body)),
                ("Registry-Delivery", item.deliveryID),
            ]
            // The request that deleted the installation, followed into the linked service.
            if let traceparent = item.traceparent { headers.append(("traceparent", traceparent)) }
            let response = await transport.post(
                endpoint: item.endpoint, body: body, headers: headers, project: item.projectID)
            let now = try await clock.now()
            let outcome: DeliveryOutcome
            switch response {
            case .status(202): outcome = .accepted
            case let .status(code) where (200..<300).contains(code): outcome = .acknowledged
            case let .status(code):
                outcome = .failed(
                    reason: "HTTP \(code)",
                    retryAt: now.addingTimeInterval(policy.backoff(afterAttempts: item.attempts)))
            case let .failed(text):
                outcome = .failed(
                    reason: String(text.prefix(500)),
                    retryAt: now.addingTimeInterval(policy.backoff(afterAttempts: item.attempts)))
            }
            try await store.record(item, outcome: outcome, at: now)
            return true
        } catch {
            return false
        }
    }
}
