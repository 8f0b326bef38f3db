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

    /// Delivers up to `batch` due notices.
    ///
    /// - Returns: how many were attempted.
    public func run(batch: Int = 50) async throws -> Int {
        let now = try await clock.now()
        let claimed = try await store.claimDue(at: now, leaseUntil: now.addingTimeInterval(policy.lease), limit: batch)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, item) in claimed.enumerated() {
                if index >= DeliveryJob.parallelism { try await group.next() }
                group.addTask { try await deliver(item) }
            }
            try await group.waitForAll()
        }
        return claimed.count
    }

    /// Delivers due notices batch after batch until none is left or the policy's ``DeletionPolicy/deliveryRunBudget``
    /// has passed, so a burst of deletions is fanned out within the run instead of `batch` notices per jobs interval.
    ///
    /// - Returns: how many were attempted.
    public func drain(batch: Int = 50) async throws -> Int {
        let budget = Duration.milliseconds(Int64(policy.deliveryRunBudget * 1000))
        let started = ContinuousClock.now
        var attempted = 0
        while true {
            let claimed = try await run(batch: batch)
            attempted += claimed
            if claimed < batch || ContinuousClock.now - started >= budget || Task.isCancelled { return attempted }
        }
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

    private func deliver(_ item: ClaimedDelivery) async throws {
        let body = DeliveryJob.body(item)
        // The signature's time is the wall clock's: the receiver checks it against its own.
        let timestamp = Int64(Date().timeIntervalSince1970)
        let headers = [
            ("Content-Type", "application/json"),
            ("Registry-Signature", WebhookSignature.header(secrets: item.secrets, timestamp: timestamp, body: body)),
            ("Registry-Delivery", item.deliveryID),
        ]
        let response = await transport.post(endpoint: item.endpoint, body: body, headers: headers)
        let now = try await clock.now()
        let outcome: DeliveryOutcome
        switch response {
        case .status(202): outcome = .accepted
        case let .status(code) where (200..<300).contains(code): outcome = .acknowledged
        case let .status(code):
            outcome = .failed(
                reason: "HTTP \(code)", retryAt: now.addingTimeInterval(policy.backoff(afterAttempts: item.attempts)))
        case let .failed(text):
            outcome = .failed(
                reason: String(text.prefix(500)),
                retryAt: now.addingTimeInterval(policy.backoff(afterAttempts: item.attempts)))
        }
        try await store.record(item, outcome: outcome, at: now)
    }
}
