import Crypto
import Foundation
import Postgres
import Registry
import RegistryPostgres
import Testing
import TokenRegistryTesting

/// What the stores report for /metrics covers every pool they read through.
@Suite("Store statistics", .enabled(if: TestDatabase.isAvailable))
struct StoreStatisticsTests {
    /// Batched reads on the read replica's pool (targeting, sendability) are counted with the primary's: a replica's
    /// batches were missing from `db_read_batch_*`.
    @Test func batchedReadsOnTheReplicasPoolAreCounted() async throws {
        try await withPools { primary, replica, box in
            let stores = PostgresRegistry.stores(pool: primary, box: box, readPool: replica)
            try await primary.batchedRead("SELECT 1 AS one")
            for _ in 0..<3 { try await replica.batchedRead("SELECT 1 AS one") }
            let statistics = stores.health.statistics
            #expect(statistics.readBatches == 4 && statistics.batchedReads == 4)
        }
    }

    /// The replica's connections are reported beside the primary's (they were missing from /metrics): one held
    /// connection shows as in use on the replica's pool only.
    @Test func theReplicasConnectionsAreReported() async throws {
        try await withPools { primary, replica, box in
            #expect(PostgresRegistry.stores(pool: primary, box: box).health.statistics.replica == nil)
            let stores = PostgresRegistry.stores(pool: primary, box: box, readPool: replica)
            try await replica.withConnection { _ in
                let statistics = stores.health.statistics
                #expect(statistics.replica == PoolConnections(inUse: 1, idle: 0, waiting: 0))
                #expect(statistics.inUse == 0)
            }
            #expect(stores.health.statistics.replica == PoolConnections(inUse: 0, idle: 1, waiting: 0))
        }
    }

    /// A primary's pool and a replica's (both on the test database, two connections each), and a master key.
    private func withPools(_ body: (PostgresPool, PostgresPool, SecretBox) async throws -> Void) async throws {
        try await TestDatabase.with { conninfo in
            let primary = PostgresPool(.init(conninfo: conninfo, maxConnections: 2))
            let replica = PostgresPool(.init(conninfo: conninfo, maxConnections: 2))
            defer {
                primary.close()
                replica.close()
            }
            try await body(primary, replica, try SecretBox(key: try SecureRandom.bytes(32)))
        }
    }
}
