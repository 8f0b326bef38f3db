import Synchronization

/// An audit entry that a write appends itself, in its own statement: the action and its entry then cost one round
/// trip and one commit, and commit or roll back together. The entry's outcome is what the write came to, looked up in
/// `outcomes` (the route computes them once, from the answers each outcome becomes).
///
/// The route hands it to the write and appends no entry of its own once the write marked it appended; a write that
/// failed (or a store that cannot) leaves it unmarked, and the route appends the entry as for any call.
public final class AuditCompanion<Outcome: CaseIterable & Hashable & Sendable>: Sendable {
    /// The entry, its `outcome` still to be chosen.
    public let draft: AuditRecord
    public let outcomes: [Outcome: String]
    private let appended = Mutex<String?>(nil)

    public init(draft: AuditRecord, outcomes: [Outcome: String]) {
        precondition(Outcome.allCases.allSatisfy { outcomes[$0] != nil }, "an audit outcome for every outcome")
        self.draft = draft
        self.outcomes = outcomes
    }

    /// The entry for a write that came to `outcome`.
    public func record(_ outcome: Outcome) -> AuditRecord { draft.with(outcome: outcomes[outcome]!) }

    /// Said by the store once the entry is committed with a write that came to `outcome`.
    public func markAppended(_ outcome: Outcome) {
        let text = outcomes[outcome]!
        appended.withLock { $0 = text }
    }

    /// The outcome of the entry the write appended; nil when none was.
    public var appendedOutcome: String? { appended.withLock { $0 } }
}

extension AuditRecord {
    public func with(outcome: String) -> AuditRecord {
        AuditRecord(
            projectID: projectID, at: at, action: action, target: target, targetDigest: targetDigest, subject: subject,
            actor: actor, requestID: requestID, outcome: outcome)
    }
}

extension AuditService {
    /// An entry for a write to append with itself (``AuditCompanion``).
    public func companion<Outcome>(
        projectID: String, action: String, target: AuditTarget, actor: String, requestID: String,
        outcomes: [Outcome: String]
    ) -> AuditCompanion<Outcome> {
        AuditCompanion(
            draft: draft(projectID: projectID, action: action, target: target, actor: actor, requestID: requestID),
            outcomes: outcomes)
    }
}
