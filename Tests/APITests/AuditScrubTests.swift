import Foundation
import Postgres
import Registry
import Testing
import TokenRegistryTesting

@testable import API

/// What a purged subject leaves in the audit log's clear text goes a bounded number of entries a round, however many
/// entries a tenant wrote about it (every audited call is one, refused ones too), and never holds back anyone else's
/// purge. The clearing used to be one statement with the purge: a few million entries about one installation made
/// it outlast its time-out, the purge rolled back, and met the same record first in every round after.
@Suite("Audit scrubs in bounded rounds", .enabled(if: TestDatabase.isAvailable))
struct AuditScrubTests {
    /// Generated: subjects around the per-subject bound (none, one, just under, at, just over, two and a half times),
    /// and six more at it, so the first round also meets the round's bound. Each round clears at most
    /// `scrubbedPerSubject` of a subject and `scrubbedPerRound` in all; every deletion record is purged in the first
    /// round whatever its entries; within a few rounds no clear text is left and the queue is empty.
    @Test func eachRoundClearsABoundedNumberAndEverySubjectIsClearedInTime() async throws {
        let perSubject = 2_000
        let perRound = 20_000
        let extra = [0, 1, perSubject - 1, perSubject, perSubject + 1, perSubject * 5 / 2] + Array(repeating: perSubject, count: 6)
        let clock = ManualClock(Date())
        try await TestService.with(clock: clock) { s in
            var fids: [String] = []
            for (n, count) in extra.enumerated() {
                let i = try await s.createInstallation()
                fids.append(i.fid)
                #expect(
                    try await s.request(
                        "DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)", headers: s.serverHeaders
                    ).status == 200)
                // The tenant's pile of entries about it, written as the audit log writes them (the clear FID and
                // its keyed hash, the record's).
                try await s.pool.query(
                    """
                    INSERT INTO audit_log (project_id, seq, at, action, target, target_digest, subject, actor,
                        request_id, outcome, previous_hash, hash)
                    SELECT d.project_id, \(10_000_000 * (n + 1)) + g, now(), 'installations.get', d.fid, d.fid_hmac,
                        true, 'server-key', 'r' || g, 'INVALID_ARGUMENT', '\\x00'::bytea, '\\x00'::bytea
                    FROM deletions d, generate_series(1, \(count)) g WHERE d.project_id = \(s.project.id) AND d.fid = \(i.fid)
                    """)
            }
            func clear() async throws -> [String: Int] {
                var counts: [String: Int] = [:]
                for row in try await s.pool.query(
                    """
                    SELECT regexp_replace(target, '^.*/', '') AS fid, count(*)::int AS n FROM audit_log
                    WHERE subject AND target IS NOT NULL GROUP BY 1
                    """)
                {
                    counts[try row.require("fid")] = try row.require("n", as: Int.self)
                }
                return counts
            }
            // A round before the purge is due chains the deletions' own entries into the log.
            _ = try await s.app.jobs.runAll()
            var before = try await clear()
            #expect(fids.allSatisfy { (before[$0] ?? 0) >= 1 }, "the deletion's own entry names each")
            clock.advance(by: 31 * 86_400)
            var rounds = 0
            while !before.isEmpty {
                rounds += 1
                #expect(rounds <= 6, "clear text left after \(rounds - 1) rounds: \(before)")
                guard rounds <= 6 else { break }
                _ = try await s.app.jobs.runAll()
                if rounds == 1 {
                    let left = try await s.pool.query(
                        "SELECT count(*)::int AS n FROM deletions WHERE project_id = \(s.project.id)")
                    #expect(try left.first?.require("n", as: Int.self) == 0, "every record purged in the first round")
                }
                let after = try await clear()
                var cleared = 0
                for (fid, count) in before {
                    let done = count - (after[fid] ?? 0)
                    #expect(done >= 0 && done <= perSubject, "\(fid): \(done) cleared in round \(rounds)")
                    cleared += done
                }
                #expect(cleared <= perRound, "round \(rounds) cleared \(cleared)")
                #expect(cleared > 0 || after.isEmpty, "round \(rounds) cleared nothing of \(after)")
                before = after
            }
            let queued = try await s.pool.query("SELECT count(*)::int AS n FROM audit_scrubs")
            #expect(try queued.first?.require("n", as: Int.self) == 0)
        }
    }
}
