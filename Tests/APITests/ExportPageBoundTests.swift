import Foundation
import JSON
import Postgres
import Registry
import RegistryPostgres
import Testing
import TokenRegistryTesting

@testable import API

/// An export page holds at most what its installations' topics and tokens weigh together (4 MiB), however many
/// topics a tenant gave each: 1,000 installations of 2,000 topics of 900 bytes were 1.8 GB read at once.
@Suite("Export pages bounded by their children", .enabled(if: TestDatabase.isAvailable))
struct ExportPageBoundTests {
    /// Generated: installations holding no topics, a few, and 2,000 topics of 900 bytes (1.8 MB each), in an order
    /// the FIDs choose. Each page the store reads stays within the bound (or is one installation), and the export
    /// streams every installation once, in FID order, with all of its topics.
    @Test func aPageEndsAtItsChildrensWeightAndTheExportGoesOn() async throws {
        try await TestService.with { s in
            var topics: [String: Int] = [:]
            for n in 0..<9 {
                let i = try await s.createInstallation()
                let count = [0, 3, 2_000][n % 3]
                topics[i.fid] = count
                try await s.pool.query(
                    """
                    INSERT INTO topic_subscriptions (project_id, fid, topic, created_at)
                    SELECT \(s.project.id), \(i.fid), lpad(g::text, 900, 't'), now() FROM generate_series(1, \(count)) g
                    """)
            }
            let store = PostgresRegistry.stores(pool: s.pool, box: s.box).imports
            var after = ""
            var seen: [String] = []
            while true {
                let page = try await store.exportPage(projectID: s.project.id, after: after, limit: 1000, ledgerLimit: 33)
                guard let last = page.last else { break }
                let weight = page.reduce(0) { $0 + $1.topics.reduce(0) { $0 + $1.topic.utf8.count + 16 } }
                #expect(page.count == 1 || weight <= 4 << 20, "a page of \(page.count) weighs \(weight)")
                seen += page.map(\.installation.fid)
                after = last.installation.fid
            }
            #expect(seen == topics.keys.sorted(), "every installation once, in FID order")
            var lines: [String: Int] = [:]
            let export = try await s.request("GET", "/v1/projects/\(s.project.id):export", headers: s.serverHeaders)
            #expect(export.status == 200)
            // The first line is the export's header.
            for line in export.text.split(separator: "\n").dropFirst() {
                let item = try JSONParser.parse(Array(line.utf8))
                let fid = try #require(item["fid"]?.stringValue)
                #expect(lines[fid] == nil, "\(fid) twice")
                lines[fid] = item["topics"]?.arrayValue?.count ?? 0
            }
            #expect(lines == topics)
        }
    }
}
