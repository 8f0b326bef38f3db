import Postgres
import Testing
import TokenRegistryTesting

/// A tenant's share of the pool (docs/security.md, class 27): whatever the interleaving of tenanted and untenanted
/// acquires, releases (kept or broken), time-outs, cancellations and failed opens, no tenant holds more than its
/// share, a connection is never left idle while a caller it may serve waits, and callers that may be served are
/// served in arrival order.
@Suite("Pool tenant share")
struct PoolTenantShareTests {
    typealias Machine = PoolStateMachine<Int>
    let now = ContinuousClock.now

    /// A tenant at its share waits though a connection is free; the other tenant's caller, arriving later, is served
    /// first, and the parked caller is served when its tenant gives one back.
    @Test func aTenantAtItsShareWaitsApartAndAnotherIsServedFirst() {
        var m = Machine(maxConnections: 4, tenantShare: 2)
        guard case .open = m.acquire(1, tenant: "a", at: now), case .open = m.acquire(2, tenant: "a", at: now) else {
            Issue.record("expected two opens")
            return
        }
        m.opened()
        #expect(m.holding("a") == 2 && m.holdsShare("a"))
        // Two more of a: parked, though two slots are free.
        guard case .wait = m.acquire(3, tenant: "a", at: now), case .wait = m.acquire(4, tenant: "a", at: now) else {
            Issue.record("a's third and fourth callers should wait")
            return
        }
        // b, and an untenanted caller, take the free slots at once.
        guard case .open = m.acquire(5, tenant: "b", at: now), case .open = m.acquire(6, at: now) else {
            Issue.record("b and the untenanted caller should open")
            return
        }
        // A full pool: b's next caller waits behind a's parked ones in time, but is served first by b's release.
        guard case .wait = m.acquire(7, tenant: "b", at: now) else {
            Issue.record("b's second caller should wait (the pool is full)")
            return
        }
        #expect(m.waiting == 3)
        guard case .lease(7, 50)? = m.release(50, reusable: true, tenant: "b", at: now) else {
            Issue.record("b's release should serve b's waiter, not a's parked ones")
            return
        }
        // The untenanted caller gives its connection back: a still holds its share, so nobody parked takes it.
        #expect(m.release(60, reusable: true, at: now) == nil && m.idleCount == 1)
        // a gives one back: its first parked caller takes it.
        guard case .lease(3, 10)? = m.release(10, reusable: true, tenant: "a", at: now) else {
            Issue.record("a's release should serve a's first parked caller")
            return
        }
        #expect(m.holding("a") == 2 && m.waiting == 1)
        #expect(m.timedOut(4) && m.waiting == 0)
    }

    @Test(arguments: 0..<60)
    func randomInterleavingsKeepEveryTenantWithinItsShare(seed: Int) {
        var rng = SplitMix(seed: UInt64(seed))
        let size = 1 + Int(rng.next() % 6)
        let share = 1 + Int(rng.next() % UInt64(size))
        var m = Machine(maxConnections: size, tenantShare: share)
        let tenants: [String?] = [nil, "a", "b", "c"]
        var tenantOf: [UInt64: String?] = [:]
        var leased: [Int: String?] = [:]
        var opening: [UInt64: String?] = [:]
        var waiting: [UInt64] = []
        var nextConnection = 100
        var backingOff = false
        var id: UInt64 = 0
        func holds(_ tenant: String) -> Int { leased.values.count { $0 == tenant } + opening.values.count { $0 == tenant } }
        // The waiters a connection may go to now, in arrival order.
        func servable() -> [UInt64] { waiting.filter { w in tenantOf[w]!.map { holds($0) < share } ?? true } }
        func grant(_ action: Machine.WaiterAction) {
            switch action {
            case let .lease(w, c):
                #expect(servable().first == w, "seed \(seed): served out of turn")
                waiting.removeAll { $0 == w }
                #expect(leased[c] == nil)
                leased[c] = tenantOf[w]!
            case let .open(w):
                #expect(servable().first == w, "seed \(seed): slot out of turn")
                waiting.removeAll { $0 == w }
                opening[w] = tenantOf[w]!
            case let .fail(w, _):
                waiting.removeAll { $0 == w }
            }
        }
        for _ in 0..<500 {
            switch rng.next() % 7 {
            case 0, 1, 2:
                id += 1
                let tenant = tenants[Int(rng.next() % 4)]
                tenantOf[id] = tenant
                switch m.acquire(id, tenant: tenant, at: now) {
                case let .lease(c):
                    #expect(leased[c] == nil)
                    leased[c] = tenant
                case .open: opening[id] = tenant
                case .wait: waiting.append(id)
                case .fail, .cancelled: break
                }
            case 3:
                if let (w, tenant) = opening.randomElement(using: &rng) {
                    opening[w] = nil
                    nextConnection += 1
                    m.opened()
                    backingOff = false
                    leased[nextConnection] = tenant
                }
            case 4:
                if let (c, tenant) = leased.randomElement(using: &rng) {
                    leased[c] = nil
                    let reusable = rng.next() % 5 != 0
                    if let action = m.release(c, reusable: reusable, tenant: tenant, at: now) { grant(action) }
                }
            case 5:
                if let w = waiting.randomElement(using: &rng) {
                    let removed = rng.next() % 2 == 0 ? m.timedOut(w) : m.cancelled(w)
                    #expect(removed)
                    waiting.removeAll { $0 == w }
                }
            default:
                if let (w, tenant) = opening.randomElement(using: &rng), rng.next() % 4 == 0 {
                    opening[w] = nil
                    // Half the failures at `now`: the pool then backs off through the releases that follow.
                    let recent = rng.next() % 2 == 0
                    backingOff = backingOff || recent
                    let failed = m.openFailed(
                        PostgresError(.connectionFailed, message: "x"), tenant: tenant,
                        at: recent ? now : now - .seconds(10))
                    for action in failed { grant(action) }
                    #expect(waiting.isEmpty)
                }
            }
            for case let tenant? in tenants {
                #expect(m.holding(tenant) == holds(tenant), "seed \(seed): \(tenant) books")
                #expect(holds(tenant) <= share, "seed \(seed): \(tenant) holds \(holds(tenant)) of \(share)")
            }
            #expect(m.inUse == leased.count + opening.count)
            #expect(m.inUse + m.idleCount <= size)
            #expect(m.waiting == waiting.count)
            // Nothing idle while a caller it may serve waits; nor a slot free, unless the pool is backing off.
            #expect(servable().isEmpty || m.idleCount == 0, "seed \(seed): idle while a servable caller waits")
            #expect(servable().isEmpty || backingOff || m.inUse + m.idleCount == size, "seed \(seed): a free slot")
        }
    }
}
