import Foundation
import JSON
import Registry

/// Send feedback in memory: the rules of `registry_apply_feedback` (migration 21), step for step.
extension InMemoryStores: FeedbackStore {
    struct StatKey: Hashable {
        let projectID: String
        let channel: FeedbackChannel
        let feedbackClass: FeedbackClass
        let minute: Date
    }

    struct BreakerKey: Hashable {
        let projectID: String
        let channel: FeedbackChannel
    }

    static func minute(_ date: Date) -> Date {
        Date(timeIntervalSince1970: (date.timeIntervalSince1970 / 60).rounded(.down) * 60)
    }

    /// The registration a result names: the exact token first, then the active holder refreshed last (an APNs
    /// device token may be held twice), then the FID in byte order.
    func holder(of token: String, channel: FeedbackChannel, projectID: String) -> (Key, Registration)? {
        registrations.filter { key, r in
            key.projectID == projectID && (r.token == token || (channel == .apns && r.apnsToken == token.lowercased()))
        }.min { a, b in
            let ka = (a.value.token == token ? 0 : 1, a.value.state == .active ? 0 : 1, -a.value.refreshedAt.timeIntervalSince1970)
            let kb = (b.value.token == token ? 0 : 1, b.value.state == .active ? 0 : 1, -b.value.refreshedAt.timeIntervalSince1970)
            return ka != kb ? ka < kb : Array(a.key.fid.utf8).lexicographicallyPrecedes(Array(b.key.fid.utf8))
        }.map { ($0.key, $0.value) }
    }

    public func apply(projectID: String, results: [FeedbackResult], policy: FeedbackPolicy, at: Date) async throws
        -> [FeedbackAction]
    {
        // The window counts the batch's distinct tokens that name a live registration, before anything applies.
        var counted = Set<String>()
        for result in results where !counted.contains(result.outcome.channel.rawValue + " " + result.token) {
            counted.insert(result.outcome.channel.rawValue + " " + result.token)
            guard holder(of: result.token, channel: result.outcome.channel, projectID: projectID)?.1.state == .active
            else { continue }
            let key = StatKey(
                projectID: projectID, channel: result.outcome.channel, feedbackClass: result.outcome.feedbackClass,
                minute: Self.minute(at))
            feedbackStats[key, default: 0] += 1
        }
        var tripped = Set<FeedbackChannel>()
        for channel in Set(results.map(\.outcome.channel)) {
            let key = BreakerKey(projectID: projectID, channel: channel)
            var breaker = breakers[key] ?? BreakerState(
                channel: channel, tripped: false, trippedAt: nil, clearedAt: nil, failing: 0, results: 0)
            let window = feedbackStats.filter {
                $0.key.projectID == projectID && $0.key.channel == channel && $0.key.minute > at.addingTimeInterval(-policy.window)
            }
            let failing = window.filter { $0.key.feedbackClass.touchesTokens }.values.reduce(0, +)
            let total = window.values.reduce(0, +)
            if breaker.tripped {
                tripped.insert(channel)
            } else if FeedbackService.trips(failing: failing, results: total, policy: policy) {
                breaker = BreakerState(
                    channel: channel, tripped: true, trippedAt: at, clearedAt: breaker.clearedAt, failing: failing,
                    results: total)
                emit(
                    .feedbackBreakerTripped, projectID, "",
                    ["channel": .string(channel.rawValue), "failing": .int(Int64(failing)), "results": .int(Int64(total))])
                tripped.insert(channel)
            }
            breakers[key] = breaker
        }
        return results.map { result in
            let outcome = result.outcome
            guard outcome.feedbackClass.touchesTokens else { return .ignored }
            guard let (key, registration) = holder(of: result.token, channel: outcome.channel, projectID: projectID),
                registration.state != .disabled
            else { return .notCurrent }
            if registration.state == .retired { return .alreadyRetired }
            let since = outcome.invalidSince.map { min($0, at) }
            if let since, registration.refreshedAt >= since { return .refreshedSince }
            let data: JSONValue = [
                "reason": .string(outcome.code), "class": .string(outcome.feedbackClass.rawValue),
                "channel": .string(outcome.channel.rawValue),
            ]
            var changed = registration
            let held = tripped.contains(outcome.channel)
            if held || outcome.feedbackClass == .suspect {
                changed.quarantine = Quarantine(
                    reason: outcome.code, channel: outcome.channel, at: registration.quarantine?.at ?? at,
                    byBreaker: (registration.quarantine?.byBreaker ?? false) || held)
                if registration.quarantine == nil { emit(.registrationQuarantined, projectID, key.fid, data) }
                updateFeedbackMarks(key, changed)
                return .quarantined
            }
            changed.state = .retired
            changed.retirement = Retirement(
                reason: outcome.code, channel: outcome.channel, at: at, invalidSince: since ?? at)
            changed.quarantine = nil
            emit(.registrationInvalidated, projectID, key.fid, data)
            updateFeedbackMarks(key, changed)
            return .retired
        }
    }

    /// Writes what feedback changed without it counting as a write of the registration (SQL's `refreshed_at` stays).
    func updateFeedbackMarks(_ key: Key, _ registration: Registration) {
        registrations[key] = registration
    }

    public func clearBreaker(projectID: String, channel: FeedbackChannel, confirm: Bool, at: Date) async throws
        -> BreakerClearance?
    {
        let key = BreakerKey(projectID: projectID, channel: channel)
        guard let breaker = breakers[key], breaker.tripped else { return nil }
        var released = 0
        var retired = 0
        for (rkey, r) in registrations where rkey.projectID == projectID {
            guard let quarantine = r.quarantine, quarantine.byBreaker, quarantine.channel == channel else { continue }
            var changed = r
            changed.quarantine = nil
            if confirm {
                changed.state = .retired
                changed.retirement = Retirement(reason: quarantine.reason, channel: channel, at: at, invalidSince: at)
                emit(
                    .registrationInvalidated, projectID, rkey.fid,
                    [
                        "reason": .string(quarantine.reason), "class": "dead", "channel": .string(channel.rawValue),
                        "confirmedBy": "operator",
                    ])
                retired += 1
            } else {
                released += 1
            }
            updateFeedbackMarks(rkey, changed)
        }
        breakers[key] = BreakerState(
            channel: channel, tripped: false, trippedAt: breaker.trippedAt, clearedAt: at, failing: breaker.failing,
            results: breaker.results)
        feedbackStats = feedbackStats.filter { !($0.key.projectID == projectID && $0.key.channel == channel) }
        return BreakerClearance(released: released, retired: retired)
    }

    public func report(projectID: String, windowStart: Date) async throws -> HygieneReport {
        var report = HygieneReport()
        for (key, r) in registrations where key.projectID == projectID {
            report.byState[r.state.rawValue, default: 0] += 1
            if r.quarantine != nil { report.quarantined += 1 }
            if r.state == .retired { report.retiredByReason[r.retirement?.reason ?? "unknown", default: 0] += 1 }
        }
        for (key, n) in feedbackStats where key.projectID == projectID && key.minute > windowStart {
            report.recent[key.channel, default: [:]][key.feedbackClass, default: 0] += n
        }
        report.breakers = breakers.filter { $0.key.projectID == projectID }.map(\.value).sorted {
            $0.channel.rawValue < $1.channel.rawValue
        }
        return report
    }

    public func purgeRetired(before cutoff: Date, statsBefore: Date, limit: Int) async throws -> Int {
        feedbackStats = feedbackStats.filter { $0.key.minute >= statsBefore }
        let due = registrations.filter { $0.value.state == .retired && ($0.value.retirement?.at ?? .distantFuture) < cutoff }
            .sorted { ($0.value.retirement?.at ?? .distantPast) < ($1.value.retirement?.at ?? .distantPast) }
            .prefix(limit)
        for (key, _) in due { registrations[key] = nil }
        return due.count
    }

    /// What a write of a registration does to send feedback's marks (`registry_feedback_revive`, migration 21):
    /// it clears quarantine, and revives a retired registration unless ``Retirement/survives(token:storedToken:clientTime:)``.
    func afterWrite(_ stored: inout Registration, existing: Registration?) {
        guard let existing else { return }
        stored.retirement = nil
        stored.quarantine = existing.quarantine
        if existing.state == .retired, stored.state != .retired, let retirement = existing.retirement {
            if retirement.survives(stored, stored: existing) {
                stored.state = .retired
                stored.retirement = retirement
                return
            }
            emit(.registrationRevived, stored.projectID, stored.fid)
        } else if stored.refreshedAt == existing.refreshedAt && stored.token == existing.token {
            return
        }
        stored.quarantine = nil
    }
}
