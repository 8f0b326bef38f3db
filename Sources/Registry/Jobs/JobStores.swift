import Foundation
import JSON

/// A delivery claimed by one worker under a lease, with what it needs to send the notice.
public struct ClaimedDelivery: Sendable, Equatable {
    public let deletionID: Int64
    public let service: String
    public let deliveryID: String
    /// Attempts so far, this one included.
    public let attempts: Int
    public let endpoint: String
    /// The secrets that sign the notice: the service's current one, and its previous one for a day after a rotation.
    public let secrets: [String]
    public let projectID: String
    public let fid: String
    public let reason: DeletionReason
    public let requestedAt: Date
    public let deadline: Date
    /// Why the notice cannot be signed (a stored secret that does not open): the attempt is recorded as failed on
    /// this delivery alone, and the rest of the batch goes on.
    public let unsendable: String?
    /// The W3C `traceparent` of the request that deleted the installation, when one did.
    public let traceparent: String?

    public init(
        deletionID: Int64, service: String, deliveryID: String, attempts: Int, endpoint: String, secrets: [String],
        projectID: String, fid: String, reason: DeletionReason, requestedAt: Date, deadline: Date,
        unsendable: String? = nil, traceparent: String? = nil
    ) {
        self.deletionID = deletionID
        self.service = service
        self.deliveryID = deliveryID
        self.attempts = attempts
        self.endpoint = endpoint
        self.secrets = secrets
        self.projectID = projectID
        self.fid = fid
        self.reason = reason
        self.requestedAt = requestedAt
        self.deadline = deadline
        self.unsendable = unsendable
        self.traceparent = traceparent
    }
}

/// What became of one delivery attempt.
public enum DeliveryOutcome: Sendable, Equatable {
    /// 202: the service will acknowledge later.
    case accepted
    /// Any other 2xx: the service confirmed.
    case acknowledged
    /// Anything else: retried at `retryAt`; `reason` is recorded as the delivery's last error.
    case failed(reason: String, retryAt: Date)
}

/// The outbox of deletion notices.
public protocol DeliveryStore: Sendable {
    /// Claims up to `limit` pending deliveries due at `now`, at most `perProject` of any one project (the most overdue
    /// of each first, so one project's backlog never takes the whole batch), each leased until `leaseUntil` (another
    /// worker may retry it after that), and counts the attempt. A row that cannot be read is recorded with its error
    /// and left out; a secret that does not open makes its delivery ``ClaimedDelivery/unsendable``. Projects in
    /// `excluding` (those with notices in flight already) are skipped.
    func claimDue(at now: Date, leaseUntil: Date, limit: Int, perProject: Int, excluding: Set<String>) async throws
        -> [ClaimedDelivery]
    /// Records the attempt's outcome; an acknowledgement completes the deletion when it was the last.
    func record(_ delivery: ClaimedDelivery, outcome: DeliveryOutcome, at now: Date) async throws
}

/// One change-feed event.
public struct FeedEvent: Sendable, Equatable {
    public let sequence: Int64
    public let type: EventType
    public let fid: String
    public let data: JSONValue?
    public let time: Date

    public init(sequence: Int64, type: EventType, fid: String, data: JSONValue?, time: Date) {
        self.sequence = sequence
        self.type = type
        self.fid = fid
        self.data = data
        self.time = time
    }
}

/// The change feed, as stored.
public protocol ChangeFeedStore: Sendable {
    /// Events of a project after `cursor`, in order.
    func events(projectID: String, after cursor: Int64, limit: Int) async throws -> [FeedEvent]
    /// Numbers the events of finished transactions and moves them into the feed, in commit-safe order (an event
    /// is numbered only once no transaction that started before it can still add one with a lower number).
    ///
    /// Moves at most `limit`, the oldest first, in one short transaction: a backlog (the feed held back behind a
    /// long transaction) is moved a batch at a time, never in one statement that could outlast its time-out and
    /// roll back for good.
    ///
    /// - Returns: how many moved; 0 when another replica is relaying.
    func relay(limit: Int) async throws -> Int
}

/// Counts that describe the deletion machinery and the jobs, the same from every replica.
public struct RegistryGauges: Sendable, Equatable {
    public struct ServiceCounters: Sendable, Equatable {
        public let projectID: String
        public let service: String
        public let attempts: Int
        public let failures: Int

        public init(projectID: String, service: String, attempts: Int, failures: Int) {
            self.projectID = projectID
            self.service = service
            self.attempts = attempts
            self.failures = failures
        }
    }

    public struct JobRun: Sendable, Equatable {
        public let job: String
        public let lastRun: Date
        public let durationSeconds: Double

        public init(job: String, lastRun: Date, durationSeconds: Double) {
            self.job = job
            self.lastRun = lastRun
            self.durationSeconds = durationSeconds
        }
    }

    public var deletions: [ReceiptState: Int]
    /// Age of the oldest deletion not yet confirmed by every service (0 when there is none).
    public var oldestUndeliveredSeconds: Double
    public var services: [ServiceCounters]
    public var jobs: [JobRun]
    /// The change feed's outbox: rows the relay has not moved yet, and the age of the oldest.
    public var outboxRows = 0
    public var outboxOldestSeconds = 0.0
    /// Age of the newest signing key that still signs (nil when there is none).
    public var signingKeyAgeSeconds: Double?
    /// Send feedback's tripped breakers, by project and channel (a project there is suspect).
    public var trippedBreakers: [TrippedBreaker] = []

    public struct TrippedBreaker: Sendable, Equatable {
        public let projectID: String
        public let channel: String

        public init(projectID: String, channel: String) {
            self.projectID = projectID
            self.channel = channel
        }
    }

    public init(
        deletions: [ReceiptState: Int], oldestUndeliveredSeconds: Double, services: [ServiceCounters], jobs: [JobRun]
    ) {
        self.deletions = deletions
        self.oldestUndeliveredSeconds = oldestUndeliveredSeconds
        self.services = services
        self.jobs = jobs
    }
}

/// Housekeeping the jobs ask of the store.
public protocol MaintenanceStore: Sendable {
    /// Removes deletion records whose audit period ended (`completedBefore`) and everything left of a FID at its
    /// deadline, recording services that never confirmed as overdue (by deletion id and FID hash). One replica at a
    /// time.
    ///
    /// At most `limit` deletion records a call (one transaction each).
    ///
    /// - Returns: the deletion records removed; 0 when another replica is purging.
    func purge(at now: Date, completedBefore: Date, limit: Int) async throws -> Int
    /// The round's work after its batches of ``purge(at:completedBefore:limit:)``, once a round whatever their number:
    /// drops feed events older than `eventsBefore` (a bounded number), clears the audit log's clear text of people
    /// whose erasure has no deletion record left, and folds the completions counted into the deletion counts. One
    /// replica at a time (nothing when another is purging).
    func finishPurge(at now: Date, eventsBefore: Date) async throws
    /// Reports each registration last refreshed before `cutoff` once, as `registration.expired`.
    func reportExpiredRegistrations(before cutoff: Date, limit: Int) async throws -> Int
    func recordRun(job: String, at: Date, durationSeconds: Double, processed: Int) async throws
    /// Registrations by freshness: `fresh`, `stale` (active, refreshed before `staleBefore`), `expired` (before
    /// `expiredBefore`), `disabled` and `retired`. A count over the table: asked for rarely.
    func registrationCounts(staleBefore: Date, expiredBefore: Date) async throws -> [String: Int]
    /// The store's own clock (PostgreSQL's `now()`), which every replica shares.
    func databaseNow() async throws -> Date
    func gauges(at now: Date) async throws -> RegistryGauges
}
