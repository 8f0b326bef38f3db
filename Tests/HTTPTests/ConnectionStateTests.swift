import Testing
import TokenRegistryTesting

@testable import HTTP

/// The connection's state machine without sockets: every transition the loop executes, and its timers.
@Suite("Connection state")
struct ConnectionStateTests {
    typealias State = ConnectionState
    static let request = State.InFlight(version: .http1_1, keepAlive: true, isHead: false)
    static let timeouts = State.Timeouts(requestMillis: 10_000, idleMillis: 75_000, writeMillis: 10_000, minBytesPerWritePeriod: 16_384)

    @Test func aKeepAliveExchangeGoesRoundToIdle() {
        var s = State(now: 0)
        #expect(s.phase == .idle && s.mayDispatch(pendingOutput: 0, maxPendingOutput: 1024))
        do {
            let ok = s.received(now: 5) == .parse
            #expect(ok)
        }
        #expect(s.phase == .reading(since: 5))
        s.dispatched(Self.request)
        #expect(s.isHandling && !s.mayDispatch(pendingOutput: 0, maxPendingOutput: 1024))
        // Bytes of the next request while this one is handled: no timer starts, nothing is dispatched.
        do {
            let ok = s.received(now: 6) == .parse
            #expect(ok)
        }
        #expect(s.isHandling)
        let answer = s.answered(closeRequested: false, draining: false)
        #expect(answer?.keepAlive == true && answer?.0 == Self.request)
        #expect(s.phase == .idle)
        s.queued(alreadyPending: 0, now: 7)
        s.sent(100)
        s.drained(now: 8)
        #expect(s.lastActivity == 8 && s.writePeriodStart == nil)
        do {
            let ok = s.endIfClosing(bufferedInput: false, midRequest: false, now: 8) == .stayOpen
            #expect(ok)
        }
        // The pipelined request's bytes start its timer when it is looked at.
        do {
            let ok = !s.needsMore(midRequest: true, pendingOutput: 0, now: 9)
            #expect(ok)
        }
        #expect(s.phase == .reading(since: 9))
    }

    @Test(arguments: [(true, false, false), (false, true, false), (false, false, true)])
    func anAnswerEndsTheConnectionWhenAnyoneAsks(closeRequested: Bool, draining: Bool, peerEnded: Bool) {
        var s = State(now: 0)
        _ = s.received(now: 1)
        s.dispatched(Self.request)
        if peerEnded {
            let closesNow = s.receivedEnd()
            #expect(!closesNow)
        }
        let answer = s.answered(closeRequested: closeRequested, draining: draining)
        #expect(answer?.keepAlive == false)
        #expect(s.closesAfterWrite && !s.mayDispatch(pendingOutput: 0, maxPendingOutput: 1024))
        s.drained(now: 2)
        // A client that may still send is read until it does (our answer then arrives before a reset).
        do {
            let ok = s.endIfClosing(bufferedInput: false, midRequest: false, now: 2) == (peerEnded ? .close : .shutWriteSideAndLinger)
            #expect(ok)
        }
    }

    @Test func aClientThatNeverAskedToKeepTheConnectionGetsItClosed() {
        var s = State(now: 0)
        s.dispatched(.init(version: .http1_0, keepAlive: false, isHead: true))
        do {
            let ok = s.answered(closeRequested: false, draining: false)?.keepAlive == false
            #expect(ok)
        }
        do {
            let ok = s.answered(closeRequested: false, draining: false) == nil
            #expect(ok, "no second answer without a request")
        }
    }

    @Test func lingeringDropsInputAndEndsAtItsDeadlineOrTheClientsEnd() {
        var s = State(now: 0)
        s.refused()
        do {
            let ok = s.endIfClosing(bufferedInput: true, midRequest: false, now: 100) == .shutWriteSideAndLinger
            #expect(ok)
        }
        do {
            let ok = s.received(now: 101) == .drop
            #expect(ok)
        }
        #expect(!s.mayDispatch(pendingOutput: 0, maxPendingOutput: 1024))
        do {
            let ok = s.expired(now: 100 + State.lingerMillis - 1, timeouts: Self.timeouts, draining: false, pendingOutput: 0, midRequest: false) == .none
            #expect(ok)
        }
        do {
            let ok = s.expired(now: 100 + State.lingerMillis, timeouts: Self.timeouts, draining: false, pendingOutput: 0, midRequest: false) == .close
            #expect(ok)
        }
        var t = State(now: 0)
        t.refused()
        _ = t.endIfClosing(bufferedInput: false, midRequest: false, now: 0)
        do {
            let ok = t.receivedEnd()
            #expect(ok, "the client's end closes a lingering connection at once")
        }
    }

    @Test func theClientsEndIsAnsweredByWhatIsOwedThenAClose() {
        var midRequest = State(now: 0)
        _ = midRequest.received(now: 1)
        do {
            let ok = !midRequest.receivedEnd()
            #expect(ok)
        }
        do {
            let ok = midRequest.needsMore(midRequest: true, pendingOutput: 0, now: 2)
            #expect(ok, "ended mid-request: close")
        }
        var owed = State(now: 0)
        do {
            let ok = !owed.receivedEnd()
            #expect(ok)
        }
        do {
            let ok = !owed.needsMore(midRequest: false, pendingOutput: 10, now: 2)
            #expect(ok, "an answer is still being written")
        }
        #expect(owed.closesAfterWrite)
        do {
            let ok = owed.endIfClosing(bufferedInput: false, midRequest: false, now: 3) == .close
            #expect(ok)
        }
        var nothing = State(now: 0)
        _ = nothing.receivedEnd()
        do {
            let ok = nothing.needsMore(midRequest: false, pendingOutput: 0, now: 2)
            #expect(ok)
        }
    }

    @Test func theRequestTimerRunsFromTheFirstByteAndAnswers408() {
        var s = State(now: 0)
        _ = s.received(now: 1000)
        let limit: UInt64 = 1000 + Self.timeouts.requestMillis
        do {
            let ok = s.expired(now: limit, timeouts: Self.timeouts, draining: false, pendingOutput: 0, midRequest: true) == .none
            #expect(ok)
        }
        do {
            let ok = s.expired(now: limit + 1, timeouts: Self.timeouts, draining: false, pendingOutput: 0, midRequest: true) == .requestTimeout
            #expect(ok)
        }
        #expect(s.closesAfterWrite)
        // A request with its handler, or an answer being written, is not timed out as unreceived.
        var handling = State(now: 0)
        _ = handling.received(now: 0)
        handling.dispatched(Self.request)
        do {
            let ok = handling.expired(now: 1_000_000, timeouts: Self.timeouts, draining: false, pendingOutput: 0, midRequest: false) == .none
            #expect(ok)
        }
    }

    @Test func idleConnectionsCloseAfterTheIdleTimeoutAndAtOnceWhileDraining() {
        // A connection that never sent a byte waits no longer than a request may take.
        var silent = State(now: 0)
        do {
            let held = silent.expired(now: Self.timeouts.requestMillis, timeouts: Self.timeouts, draining: false, pendingOutput: 0, midRequest: false) == .none
            let closed = silent.expired(now: Self.timeouts.requestMillis + 1, timeouts: Self.timeouts, draining: false, pendingOutput: 0, midRequest: false) == .close
            #expect(held && closed)
        }
        // Once an answer went out whole, the idle timeout applies.
        var s = State(now: 0)
        s.drained(now: 0)
        do {
            let ok = s.expired(now: Self.timeouts.idleMillis, timeouts: Self.timeouts, draining: false, pendingOutput: 0, midRequest: false) == .none
            #expect(ok)
        }
        do {
            let ok = s.expired(now: Self.timeouts.idleMillis + 1, timeouts: Self.timeouts, draining: false, pendingOutput: 0, midRequest: false) == .close
            #expect(ok)
        }
        var d = State(now: 0)
        do {
            let ok = d.expired(now: 1, timeouts: Self.timeouts, draining: true, pendingOutput: 0, midRequest: false) == .close
            #expect(ok)
        }
        #expect(d.isIdle(pendingOutput: 0, midRequest: false) && !d.isIdle(pendingOutput: 1, midRequest: false))
    }

    @Test func aClientThatReadsTooSlowlyIsResetEachPeriodMustSendItsMinimum() {
        var s = State(now: 0)
        s.queued(alreadyPending: 0, now: 0)
        s.sent(Self.timeouts.minBytesPerWritePeriod)
        // Enough in the first period: a new one starts.
        do {
            let ok = s.expired(now: 10_001, timeouts: Self.timeouts, draining: false, pendingOutput: 5, midRequest: false) == .none
            #expect(ok)
        }
        #expect(s.writePeriodStart == 10_001)
        s.sent(1)
        do {
            let ok = s.expired(now: 20_002, timeouts: Self.timeouts, draining: false, pendingOutput: 5, midRequest: false) == .reset
            #expect(ok)
        }
        // Queued behind unsent output, an answer does not restart the period.
        var t = State(now: 0)
        t.queued(alreadyPending: 0, now: 0)
        t.queued(alreadyPending: 10, now: 9_000)
        #expect(t.writePeriodStart == 0)
    }

    @Test func interestFollowsBackpressureAndTheClientsEnd() {
        var s = State(now: 0)
        #expect(s.interest(pendingOutput: 0, bufferedInput: 0, maxPendingOutput: 100, maxBufferedInput: 100) == (true, false))
        #expect(s.interest(pendingOutput: 100, bufferedInput: 0, maxPendingOutput: 100, maxBufferedInput: 100) == (false, true))
        #expect(s.interest(pendingOutput: 0, bufferedInput: 101, maxPendingOutput: 100, maxBufferedInput: 100) == (false, false))
        s.refused()
        _ = s.endIfClosing(bufferedInput: true, midRequest: false, now: 0)
        // Lingering reads (and drops) whatever the bounds.
        #expect(s.interest(pendingOutput: 0, bufferedInput: 101, maxPendingOutput: 100, maxBufferedInput: 100).read)
        var ended = State(now: 0)
        _ = ended.receivedEnd()
        #expect(!ended.interest(pendingOutput: 0, bufferedInput: 0, maxPendingOutput: 100, maxBufferedInput: 100).read)
    }

    /// Beyond the allowance, input is read only for the request being received: not behind a request with its
    /// handler or an answer waiting to be sent (pipelined requests wait in the kernel), and not while the process is
    /// over its budget. Under the allowance, reading goes on whatever the rest.
    @Test func inputBeyondTheAllowanceIsReadOnlyForTheRequestBeingReceived() {
        let allowance = State.inputAllowance
        let big = 4 * 1024 * 1024
        var s = State(now: 0)
        _ = s.received(now: 1)
        #expect(s.interest(pendingOutput: 0, bufferedInput: allowance + 1, maxPendingOutput: 100, maxBufferedInput: big).read)
        #expect(!s.interest(pendingOutput: 0, bufferedInput: 10, maxPendingOutput: 100, maxBufferedInput: big, waitsForInputBudget: true).read)
        #expect(!s.interest(pendingOutput: 1, bufferedInput: allowance + 1, maxPendingOutput: 100, maxBufferedInput: big).read)
        s.dispatched(Self.request)
        #expect(!s.interest(pendingOutput: 0, bufferedInput: allowance + 1, maxPendingOutput: 100, maxBufferedInput: big).read)
        #expect(s.interest(pendingOutput: 0, bufferedInput: allowance, maxPendingOutput: 100, maxBufferedInput: big).read)
    }

    /// Over the process's output budget, a connection with unsent answers dispatches nothing more; one that has sent
    /// all of its own goes on.
    @Test func overTheOutputBudgetOnlyAConnectionWithNothingUnsentDispatches() {
        let s = State(now: 0)
        #expect(s.mayDispatch(pendingOutput: 10, maxPendingOutput: 100))
        #expect(!s.mayDispatch(pendingOutput: 10, maxPendingOutput: 100, outputOverBudget: true))
        #expect(s.mayDispatch(pendingOutput: 0, maxPendingOutput: 100, outputOverBudget: true))
    }

    /// Random sequences of every event, as the loop would make them (a request is dispatched only when the state
    /// allows one): never two requests with handlers, an answer only for a request, and a connection that ended
    /// never dispatches again.
    @Test func randomEventSequencesKeepTheInvariants() {
        var random = SplitMix(seed: 0x5eed_c0de)
        for _ in 0..<2000 {
            var s = State(now: 0)
            var now: UInt64 = 0
            var ended = false
            for _ in 0..<40 {
                now += random.next() % 3000
                let pending = Int(random.next() % 3) * 10
                switch random.next() % 9 {
                case 0: _ = s.received(now: now)
                case 1: if s.receivedEnd() { ended = true }
                case 2:
                    if s.needsMore(midRequest: random.next() % 2 == 0, pendingOutput: pending, now: now) { ended = true }
                case 3:
                    if s.mayDispatch(pendingOutput: pending, maxPendingOutput: 20) {
                        #expect(!s.isHandling)
                        s.dispatched(Self.request)
                    }
                case 4:
                    let wasHandling = s.isHandling
                    do {
                        let ok = (s.answered(closeRequested: random.next() % 4 == 0, draining: false) != nil) == wasHandling
                        #expect(ok)
                    }
                case 5: if s.mayDispatch(pendingOutput: pending, maxPendingOutput: 20) { s.refused() }
                case 6:
                    s.drained(now: now)
                    if s.endIfClosing(bufferedInput: random.next() % 2 == 0, midRequest: false, now: now) == .close {
                        ended = true
                    }
                case 7:
                    switch s.expired(now: now, timeouts: Self.timeouts, draining: random.next() % 5 == 0, pendingOutput: pending, midRequest: false) {
                    case .close, .reset: ended = true
                    case .requestTimeout: #expect(s.closesAfterWrite)
                    case .none: break
                    }
                default: s.queued(alreadyPending: pending, now: now)
                }
                if ended { break }
                if s.isHandling || s.closesAfterWrite || s.isLingering {
                    #expect(!s.mayDispatch(pendingOutput: 0, maxPendingOutput: 20))
                }
            }
        }
    }
}
