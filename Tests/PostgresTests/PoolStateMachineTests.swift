import Postgres
import Testing
import TokenRegistryTesting

/// The pool's decisions through every interleaving of acquire, release, time-out, cancellation and close, with no
/// database: connections are plain numbers.
@Suite("Pool state machine")
struct PoolStateMachineTests {
    typealias Machine = PoolStateMachine<Int>
    let now = ContinuousClock.now

    static func leased(_ action: Machine.AcquireAction) -> Int? {
        if case let .lease(c) = action { return c }
        return nil
    }

    /// Every combination of what a returned connection is like: only a healthy one out of any transaction, and on a
    /// loop whenever the pool has loops, is kept.
    @Test(arguments: [false, true], [false, true])
    func theMachineDecidesWhichReturnedConnectionIsKept(healthy: Bool, inTransaction: Bool) {
        for onLoop in [false, true] {
            for loopsAttached in [false, true] {
                var m = Machine(maxConnections: 1)
                guard case .open = m.acquire(1, at: now) else { return }
                m.opened()
                let returned = Machine.Returned(
                    healthy: healthy, inTransaction: inTransaction, onLoop: onLoop, loopsAttached: loopsAttached)
                _ = m.release(7, returned, at: now)
                let kept = healthy && !inTransaction && (onLoop || !loopsAttached)
                #expect(m.idleCount == (kept ? 1 : 0), "\(returned)")
                #expect(returned.isReusable == kept)
            }
        }
    }

    @Test func opensUpToTheLimitThenReusesIdleConnections() {
        var m = Machine(maxConnections: 2)
        guard case .open = m.acquire(1, at: now), case .open = m.acquire(2, at: now) else {
            Issue.record("expected two opens")
            return
        }
        m.opened()
        #expect(m.inUse == 2)
        let check1 = m.release(10, reusable: true, at: now) == nil
        #expect(check1)
        #expect(m.idleCount == 1 && m.inUse == 1)
        let check2 = Self.leased(m.acquire(3, at: now)) == 10
        #expect(check2)
    }

    @Test func aFullPoolQueuesWaitersAndReleasesServeThemInOrder() {
        var m = Machine(maxConnections: 1)
        _ = m.acquire(1, at: now)
        // Deciding to wait and registering are one call: a release right after finds the waiter.
        guard case .wait = m.acquire(2, at: now), case .wait = m.acquire(3, at: now) else {
            Issue.record("expected waits")
            return
        }
        #expect(m.waiting == 2)
        guard case let .lease(waiter, connection)? = m.release(7, reusable: true, at: now) else {
            Issue.record("expected a hand-off")
            return
        }
        #expect(waiter == 2 && connection == 7 && m.waiting == 1 && m.idleCount == 0)
        guard case .lease(3, 7)? = m.release(7, reusable: true, at: now) else {
            Issue.record("expected the second waiter")
            return
        }
        let check3 = m.release(7, reusable: true, at: now) == nil && m.idleCount == 1
        #expect(check3)
    }

    @Test func aTimedOutWaiterIsForgottenAndItsTurnPasses() {
        var m = Machine(maxConnections: 1)
        _ = m.acquire(1, at: now)
        _ = m.acquire(2, at: now)
        _ = m.acquire(3, at: now)
        let check4 = m.timedOut(2)
        #expect(check4)
        let check5 = !m.timedOut(2)  // a second time-out (a late timer) does nothing
        #expect(check5)
        guard case .lease(3, _)? = m.release(5, reusable: true, at: now) else {
            Issue.record("the turn should pass to waiter 3")
            return
        }
        let check6 = !m.timedOut(3)  // served already: the timer fires too late and is ignored
        #expect(check6)
    }

    @Test func cancellationBeforeAskingWhileWaitingAndAfterBeingServed() {
        var m = Machine(maxConnections: 1)
        _ = m.acquire(1, at: now)
        // Cancelled before it asked: it fails when it does, and leaves no waiter behind.
        let check7 = !m.cancelled(2)
        #expect(check7)
        guard case .cancelled = m.acquire(2, at: now) else {
            Issue.record("expected cancelled")
            return
        }
        #expect(m.waiting == 0)
        // Cancelled while waiting: removed; the next release parks the connection instead.
        _ = m.acquire(3, at: now)
        let check8 = m.cancelled(3) && m.waiting == 0
        #expect(check8)
        let check9 = m.release(9, reusable: true, at: now) == nil && m.idleCount == 1
        #expect(check9)
        // Served, then cancelled: the connection is the caller's (it releases it); nothing is left noted.
        let check10 = Self.leased(m.acquire(4, at: now)) == 9
        #expect(check10)
        _ = m.cancelled(4)
        m.served(4)
        let check11 = m.release(9, reusable: true, at: now) == nil
        #expect(check11)
        let check12 = Self.leased(m.acquire(4, at: now)) == 9
        #expect(check12)
    }

    @Test func aBrokenConnectionFreesASlotForTheNextWaiter() {
        var m = Machine(maxConnections: 1)
        _ = m.acquire(1, at: now)
        _ = m.acquire(2, at: now)
        guard case .open(waiter: 2)? = m.release(1, reusable: false, at: now) else {
            Issue.record("expected a slot for waiter 2")
            return
        }
        #expect(m.inUse == 1 && m.waiting == 0)
    }

    @Test func aFailedOpenFailsTheWaitersAndBacksOff() {
        var m = Machine(maxConnections: 1)
        _ = m.acquire(1, at: now)
        _ = m.acquire(2, at: now)
        let failed = m.openFailed(PostgresError(.connectionFailed, message: "down"), at: now)
        #expect(failed.count == 1 && m.inUse == 0 && m.waiting == 0)
        guard case .fail = m.acquire(3, at: now + .milliseconds(25)) else {
            Issue.record("expected to fail fast inside the back-off window")
            return
        }
        guard case .open = m.acquire(4, at: now + .milliseconds(60)) else {
            Issue.record("expected a new attempt after the window")
            return
        }
        m.opened()
        let check13 = m.release(1, reusable: true, at: now) == nil
        #expect(check13)
    }

    /// However long the database has been down, the next attempt is at most ``Machine/maxBackoff`` away, so a
    /// replica serves within a second of a failover's new primary accepting writes.
    @Test func theBackOffStopsGrowingAtItsCap() {
        var m = Machine(maxConnections: 1)
        var t = now
        for _ in 0..<20 {
            guard case .open = m.acquire(1, at: t) else {
                Issue.record("expected an attempt once the window had passed")
                return
            }
            _ = m.openFailed(PostgresError(.connectionFailed, message: "down"), at: t)
            t = t + Machine.maxBackoff
        }
        #expect(Machine.maxBackoff <= .milliseconds(500))
        guard case .fail = m.acquire(2, at: t - Machine.maxBackoff + .milliseconds(400)) else {
            Issue.record("expected to fail fast inside the capped window")
            return
        }
    }

    @Test func closeFailsWaitersDropsIdleConnectionsAndLaterCallers() {
        var m = Machine(maxConnections: 2)
        _ = m.acquire(1, at: now)
        _ = m.acquire(2, at: now)
        let check14 = m.release(20, reusable: true, at: now) == nil
        #expect(check14)
        _ = m.acquire(3, at: now)  // takes 20
        _ = m.acquire(4, at: now)  // waits
        let (idle, waiters) = m.close()
        #expect(idle.isEmpty && waiters.count == 1 && m.waiting == 0)
        guard case .fail = m.acquire(5, at: now) else {
            Issue.record("a closed pool refuses")
            return
        }
        let check15 = m.release(20, reusable: true, at: now) == nil && m.inUse == 1 && m.idleCount == 0
        #expect(check15)
    }

    /// Random interleavings: the counts always add up, no connection is handed out twice or lost, and no caller
    /// waits while a connection sits idle.
    @Test(arguments: 0..<20)
    func randomInterleavingsKeepTheBooks(seed: Int) {
        var rng = SplitMix(seed: UInt64(seed))
        var m = Machine(maxConnections: 3)
        var leased: Set<Int> = []
        var opening: Set<UInt64> = []
        var waiting: Set<UInt64> = []
        var nextConnection = 100
        var id: UInt64 = 0
        func grant(_ action: Machine.WaiterAction) {
            switch action {
            case let .lease(w, c):
                let wasWaiting = waiting.remove(w) != nil
                let fresh = leased.insert(c).inserted
                #expect(wasWaiting && fresh)
            case let .open(w):
                let wasWaiting = waiting.remove(w) != nil
                #expect(wasWaiting)
                opening.insert(w)
            case let .fail(w, _):
                let wasWaiting = waiting.remove(w) != nil
                #expect(wasWaiting)
            }
        }
        for _ in 0..<400 {
            switch rng.next() % 6 {
            case 0, 1:
                id += 1
                switch m.acquire(id, at: now) {
                case let .lease(c):
                    let fresh = leased.insert(c).inserted
                    #expect(fresh)
                case .open: opening.insert(id)
                case .wait: waiting.insert(id)
                case .fail, .cancelled: break
                }
            case 2:
                if let w = opening.randomElement(using: &rng) {
                    opening.remove(w)
                    nextConnection += 1
                    m.opened()
                    leased.insert(nextConnection)
                }
            case 3:
                if let c = leased.randomElement(using: &rng) {
                    leased.remove(c)
                    if let action = m.release(c, reusable: rng.next() % 5 != 0, at: now) { grant(action) }
                }
            case 4:
                if let w = waiting.randomElement(using: &rng) {
                    let removed = rng.next() % 2 == 0 ? m.timedOut(w) : m.cancelled(w)
                    #expect(removed)
                    waiting.remove(w)
                }
            default:
                if let w = opening.randomElement(using: &rng), rng.next() % 4 == 0 {
                    opening.remove(w)
                    for action in m.openFailed(PostgresError(.connectionFailed, message: "x"), at: now - .seconds(10)) {
                        grant(action)
                    }
                }
            }
            #expect(m.inUse == leased.count + opening.count)
            #expect(m.inUse + m.idleCount <= 3)
            #expect(m.waiting == waiting.count)
            #expect(m.waiting == 0 || m.idleCount == 0)
        }
    }
}

extension PoolStateMachine<Int>.WaiterAction: Equatable {
    public static func == (a: Self, b: Self) -> Bool {
        switch (a, b) {
        case let (.lease(w1, c1), .lease(w2, c2)): return w1 == w2 && c1 == c2
        case let (.open(w1), .open(w2)): return w1 == w2
        case let (.fail(w1, _), .fail(w2, _)): return w1 == w2
        default: return false
        }
    }
}
