import Crypto
import Foundation

/// What an audit entry names as the object of an action.
public enum AuditTarget: Sendable, Equatable {
    /// An installation: a data subject. Its clear FID leaves the log when the installation's deletion is purged.
    case installation(String)
    /// A person, by the app's user ID: a data subject, cleared from the log when the person's erasure is purged.
    case user(String)
    /// A push token that carries no FID (APNs, web push): named by a keyed hash of it, never in clear (a token is a
    /// sendable credential), so no entry can be matched against a token from elsewhere.
    case token(String)
    /// Anything else: a project, an app, a key, a linked service, a topic.
    case resource(String)

    public var text: String {
        switch self {
        case let .installation(fid): return "installations/" + fid
        case let .user(id): return "users/" + id
        case .token: return "registrations/token"
        case let .resource(name): return name
        }
    }

    public var isSubject: Bool {
        switch self {
        case .installation, .user: return true
        case .token, .resource: return false
        }
    }
}

/// An entry as a request appends it, before it is chained.
public struct AuditRecord: Sendable, Equatable {
    public let projectID: String
    public let at: Date
    public let action: String
    public let target: String
    /// What the chain covers of the target: the subject's keyed hash, or the SHA-256 of a resource's name.
    public let targetDigest: [UInt8]
    public let subject: Bool
    /// The credential that acted, by ID (never the secret): `serverKey:<fingerprint>`, `serviceAccount:<key id>`,
    /// `cli:<user>`.
    public let actor: String
    public let requestID: String
    /// `OK`, or the canonical status the request failed with.
    public let outcome: String

    public init(
        projectID: String, at: Date, action: String, target: String, targetDigest: [UInt8], subject: Bool,
        actor: String, requestID: String, outcome: String
    ) {
        self.projectID = projectID
        self.at = at
        self.action = action
        self.target = target
        self.targetDigest = targetDigest
        self.subject = subject
        self.actor = actor
        self.requestID = requestID
        self.outcome = outcome
    }
}

/// A chained entry: numbered within its project, hashed with the previous entry's hash.
public struct AuditEntry: Sendable, Equatable {
    public let projectID: String
    public let seq: Int64
    public let at: Date
    /// The time as the hash covers it: microseconds since 1970.
    public let atMicros: Int64
    public let action: String
    /// Nil once the subject it named was purged (the digest stays, and the chain verifies).
    public let target: String?
    public let targetDigest: [UInt8]
    public let subject: Bool
    public let actor: String
    public let requestID: String
    public let outcome: String
    public let previousHash: [UInt8]
    public let hash: [UInt8]

    public init(
        projectID: String, seq: Int64, at: Date, atMicros: Int64, action: String, target: String?,
        targetDigest: [UInt8], subject: Bool, actor: String, requestID: String, outcome: String,
        previousHash: [UInt8], hash: [UInt8]
    ) {
        self.projectID = projectID
        self.seq = seq
        self.at = at
        self.atMicros = atMicros
        self.action = action
        self.target = target
        self.targetDigest = targetDigest
        self.subject = subject
        self.actor = actor
        self.requestID = requestID
        self.outcome = outcome
        self.previousHash = previousHash
        self.hash = hash
    }
}

/// Where a project's chain starts (the last entry of the segment purged last, or zeros) and where it ends.
public struct AuditChainState: Sendable, Equatable {
    public let anchorSeq: Int64
    public let anchorHash: [UInt8]
    public let headSeq: Int64
    public let headHash: [UInt8]
    /// Entries appended and not chained yet.
    public let pending: Int

    public init(anchorSeq: Int64, anchorHash: [UInt8], headSeq: Int64, headHash: [UInt8], pending: Int) {
        self.anchorSeq = anchorSeq
        self.anchorHash = anchorHash
        self.headSeq = headSeq
        self.headHash = headHash
        self.pending = pending
    }
}

/// A chain's head after a chainer's call moved it: the jobs log each, so heads recorded outside the database witness
/// the chain (a rewritten one disagrees with them: `token-registry audit verify --head`).
public struct AuditHead: Sendable, Equatable {
    public let projectID: String
    public let seq: Int64
    public let hash: [UInt8]
    /// Entries this call chained.
    public let chained: Int

    public init(projectID: String, seq: Int64, hash: [UInt8], chained: Int) {
        self.projectID = projectID
        self.seq = seq
        self.hash = hash
        self.chained = chained
    }
}

/// Storage of the audit log.
public protocol AuditStore: Sendable {
    /// Appends an entry unchained: no lock, so the busiest route pays one insert.
    func append(_ record: AuditRecord) async throws
    /// Chains up to `limit` pending entries in arrival order, at most `share` of one project, each project's under
    /// its chain's lock, in one transaction; one chainer at a time (another answers none). The heads it moved.
    func chain(limit: Int, share: Int) async throws -> [AuditHead]
    /// The chain of a project; nil when it has no entry yet (and none pending).
    func chainState(projectID: String) async throws -> AuditChainState?
    /// Chained entries after `afterSeq`, in order.
    func entries(projectID: String, afterSeq: Int64, limit: Int) async throws -> [AuditEntry]
    /// Drops, per project, the chained entries older than `before` that no younger entry precedes (a prefix of the
    /// chain: it stays verifiable from its new anchor), at most `limit`, and appends an `audit.purge` entry saying
    /// so (at `at`). Returns how many.
    func purge(before: Date, at: Date, limit: Int) async throws -> Int
    /// Projects with a chain.
    func chainedProjects() async throws -> [String]
}

/// The hash chain's arithmetic: what each entry's hash covers, and a chain's check.
public enum AuditChain {
    public static let genesis = [UInt8](repeating: 0, count: 32)

    /// The fields after the previous hash, each as `<octets>:<text>` in a fixed order (migration 23's
    /// `registry_audit_canonical` writes the same bytes).
    public static func canonical(_ e: AuditEntry) -> [UInt8] {
        let fields = [
            e.projectID, String(e.seq), String(e.atMicros), e.action, Hex.encode(e.targetDigest), e.subject ? "s" : "r",
            e.actor, e.requestID, e.outcome,
        ]
        var out: [UInt8] = []
        for field in fields {
            out.append(contentsOf: "\(field.utf8.count):".utf8)
            out.append(contentsOf: field.utf8)
        }
        return out
    }

    public static func hash(previous: [UInt8], _ entry: AuditEntry) -> [UInt8] {
        SHA256.hash(previous + canonical(entry))
    }

    /// Time as the chain covers it.
    public static func micros(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1_000_000).rounded(.down))
    }
}

/// A chain check's findings: entries checked, and what did not hold (the first problems, by entry).
public struct AuditVerification: Sendable, Equatable {
    public var projectID: String
    public var checked = 0
    public var problems: [String] = []
    public var pending = 0
    public var headSeq: Int64 = 0

    public var intact: Bool { problems.isEmpty }
}

/// The audit log: entries appended by every action a server credential or the CLI takes, chained, paged, checked,
/// kept for a retention period.
public struct AuditService: Sendable {
    let store: any AuditStore
    public let clock: any WallClock
    let hasher: FIDHasher
    /// Chained entries older than this are dropped (the chain stays verifiable from its new anchor).
    public var retention: TimeInterval = 400 * 86_400

    public init(store: any AuditStore, clock: any WallClock, hasher: FIDHasher, retention: TimeInterval) {
        self.store = store
        self.clock = clock
        self.hasher = hasher
        self.retention = retention
    }

    /// The digest the chain covers for `target` of `projectID`.
    public func digest(projectID: String, _ target: AuditTarget) -> [UInt8] {
        switch target {
        case let .installation(fid): return hasher.hash(projectID: projectID, fid: fid)
        case let .user(id): return hasher.hash(projectID: projectID, fid: "user:" + id)
        case .token: return SHA256.hash(text(projectID: projectID, target))
        case let .resource(name): return SHA256.hash(name)
        }
    }

    /// What an entry says of `target`: a token as `registrations/token:<24 hex digits of its keyed hash>`.
    func text(projectID: String, _ target: AuditTarget) -> String {
        guard case let .token(token) = target else { return target.text }
        return "registrations/token:" + Hex.encode(hasher.hash(projectID: projectID, fid: "token:" + token).prefix(12))
    }

    /// Appends one entry.
    public func record(
        projectID: String, action: String, target: AuditTarget, actor: String, requestID: String, outcome: String
    ) async throws {
        try await store.append(
            draft(projectID: projectID, action: action, target: target, actor: actor, requestID: requestID)
                .with(outcome: outcome))
    }

    /// An entry stamped now, its outcome empty.
    func draft(projectID: String, action: String, target: AuditTarget, actor: String, requestID: String)
        -> AuditRecord
    {
        AuditRecord(
            projectID: projectID, at: clock.now(), action: action, target: text(projectID: projectID, target),
            targetDigest: digest(projectID: projectID, target), subject: target.isSubject, actor: actor,
            requestID: requestID, outcome: "")
    }

    /// Chains what is pending, batch by batch (the jobs loop does it each round; reads do it first, so a page shows
    /// the latest): the heads it moved, the last of each project.
    @discardableResult
    public func chain(limit: Int = 100_000) async throws -> [AuditHead] {
        var heads: [String: AuditHead] = [:]
        var total = 0
        while total < limit {
            let batch = min(AuditService.chainBatch, limit - total)
            let moved = try await store.chain(limit: batch, share: AuditService.chainShare)
            var chained = 0
            for head in moved {
                chained += head.chained
                heads[head.projectID] = AuditHead(
                    projectID: head.projectID, seq: head.seq, hash: head.hash,
                    chained: (heads[head.projectID]?.chained ?? 0) + head.chained)
            }
            total += chained
            // A call takes at most `chainShare` of one project, so a short call does not mean the queue is empty: only
            // one that chained nothing does (or found another chainer at work). Ending at a short call chained at
            // most 500 entries of a busy project a run, fewer than it wrote, and its queue grew without end.
            if chained == 0 { break }
        }
        return heads.values.sorted { $0.projectID < $1.projectID }
    }

    /// Entries one chainer's call (one transaction) takes, and of those at most this many of one project.
    public static let chainBatch = 2000
    static let chainShare = 500

    public func entries(projectID: String, afterSeq: Int64, limit: Int) async throws -> [AuditEntry] {
        try await store.entries(projectID: projectID, afterSeq: afterSeq, limit: limit)
    }

    public func state(projectID: String) async throws -> AuditChainState? {
        try await store.chainState(projectID: projectID)
    }

    public func projects() async throws -> [String] { try await store.chainedProjects() }

    /// Drops what is past the retention at `now`.
    public func purge(now: Date, limit: Int = 100_000) async throws -> Int {
        try await store.purge(before: now.addingTimeInterval(-retention), at: now, limit: limit)
    }

    /// The entry a retention purge appends to the chain it shortened.
    public static func purgeRecord(projectID: String, anchorSeq: Int64, at: Date) -> AuditRecord {
        AuditRecord(
            projectID: projectID, at: at, action: "audit.purge", target: "auditLog", targetDigest: SHA256.hash("auditLog"),
            subject: false, actor: "jobs", requestID: "purge-\(anchorSeq)", outcome: "OK")
    }

    /// Checks a project's chain from its anchor to its head: numbering without gaps, each entry's previous hash the
    /// one before's hash, each hash recomputed, each clear target against its digest, the last entry the head; and,
    /// given `expected` heads recorded elsewhere (the jobs log each), that the entry of each number still has that
    /// hash. Entries chained after the head it read are left for the next check; a retention purge that moved the
    /// anchor meanwhile makes it start again.
    public func verify(
        projectID: String, expected: [(seq: Int64, hash: [UInt8])] = [], maxProblems: Int = 20
    ) async throws -> AuditVerification {
        var report = AuditVerification(projectID: projectID)
        for _ in 0..<3 {
            guard let state = try await store.chainState(projectID: projectID) else { break }
            report = try await verify(projectID: projectID, from: state, expected: expected, maxProblems: maxProblems)
            guard !report.intact, let now = try await store.chainState(projectID: projectID),
                now.anchorSeq != state.anchorSeq
            else { break }
        }
        return report
    }

    private func verify(
        projectID: String, from state: AuditChainState, expected: [(seq: Int64, hash: [UInt8])], maxProblems: Int
    ) async throws -> AuditVerification {
        var report = AuditVerification(projectID: projectID)
        report.pending = state.pending
        report.headSeq = state.headSeq
        var expectedSeq = state.anchorSeq + 1
        var previous = state.anchorHash
        var after = state.anchorSeq
        var witnessed = Dictionary(expected.map { ($0.seq, $0.hash) }, uniquingKeysWith: { first, _ in first })
        func problem(_ text: String) { if report.problems.count < maxProblems { report.problems.append(text) } }
        if let anchorWitness = witnessed.removeValue(forKey: state.anchorSeq), anchorWitness != state.anchorHash {
            problem("the anchor, entry \(state.anchorSeq), does not have the hash recorded for it")
        }
        reading: while after < state.headSeq {
            let page = try await store.entries(
                projectID: projectID, afterSeq: after, limit: Int(min(5000, state.headSeq - after)))
            for entry in page {
                if entry.seq > state.headSeq { break reading }
                report.checked += 1
                if entry.seq != expectedSeq {
                    problem("entry \(entry.seq): expected entry \(expectedSeq) (an entry was removed or renumbered)")
                }
                if entry.previousHash != previous {
                    problem("entry \(entry.seq): its previous hash is not entry \(entry.seq - 1)'s hash")
                }
                if AuditChain.hash(previous: entry.previousHash, entry) != entry.hash {
                    problem("entry \(entry.seq): its hash does not match its contents (it was edited)")
                }
                if let target = entry.target, !targetMatches(entry, target) {
                    problem("entry \(entry.seq): its target does not match the digest the chain covers")
                }
                if let witness = witnessed.removeValue(forKey: entry.seq), witness != entry.hash {
                    problem("entry \(entry.seq): its hash is not the one recorded for it (the chain was rewritten)")
                }
                previous = entry.hash
                expectedSeq = entry.seq + 1
                after = entry.seq
            }
            if page.isEmpty { break }
        }
        if after != state.headSeq || previous != state.headHash {
            problem("the chain ends at entry \(after), its head says entry \(state.headSeq) (entries were removed)")
        }
        // A recorded head before the anchor was purged with its segment; one after the head is missing.
        for (seq, _) in witnessed.sorted(by: { $0.key < $1.key }) where seq > state.anchorSeq {
            problem("entry \(seq), recorded elsewhere, is missing (the chain was cut short)")
        }
        return report
    }

    private func targetMatches(_ entry: AuditEntry, _ target: String) -> Bool {
        let parsed: AuditTarget
        if !entry.subject {
            parsed = .resource(target)
        } else if target.hasPrefix("installations/") {
            parsed = .installation(String(target.dropFirst("installations/".count)))
        } else if target.hasPrefix("users/") {
            parsed = .user(String(target.dropFirst("users/".count)))
        } else {
            return false
        }
        return digest(projectID: entry.projectID, parsed) == entry.targetDigest
    }
}
