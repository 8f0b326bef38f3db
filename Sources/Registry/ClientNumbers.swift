import Foundation

/// Arithmetic on numbers a client chose (a signature's time, a JWT's `iat` and `exp`, a check-in's identity), in one
/// place: every operation here is defined for every input, the Int64 edges included, and none can trap. Code that
/// compares a client's number with another does it through these, never with `-`, `+` or `abs` on the raw values.
public enum ClientNumbers {
    /// `to - from`, or nil when the difference does not fit in an Int64.
    public static func span(from: Int64, to: Int64) -> Int64? {
        let (difference, overflow) = to.subtractingReportingOverflow(from)
        return overflow ? nil : difference
    }

    /// `a + b`, saturated at the Int64 edges.
    public static func adding(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        guard overflow else { return sum }
        return b > 0 ? .max : .min
    }

    /// True when `value` lies within `tolerance` (≥ 0) of `reference`, either side.
    public static func isWithin(_ value: Int64, _ tolerance: Int64, of reference: Int64) -> Bool {
        value >= adding(reference, -tolerance) && value <= adding(reference, tolerance)
    }

    /// True when `end` is after `start` by at most `maximum` seconds.
    public static func isOrderedSpan(from start: Int64, to end: Int64, atMost maximum: Int64) -> Bool {
        guard end > start, let span = span(from: start, to: end) else { return false }
        return span <= maximum
    }

    /// An unsigned identity as Int64 when it fits (≤ Int64.max), else nil.
    public static func signed(_ value: UInt64) -> Int64? { Int64(exactly: value) }

    /// The whole number `value` when it is finite and within `range`; nil otherwise (NaN, infinities, fractions and
    /// out-of-range values never reach an `Int(…)` conversion, which would trap).
    public static func integer(_ value: Double, in range: ClosedRange<Int64>) -> Int64? {
        guard value.isFinite, value.rounded() == value, value >= Double(range.lowerBound),
            value <= Double(range.upperBound), value < 9.223372036854775807e18
        else { return nil }
        return Int64(value)
    }

    /// Seconds since 1970 of a date, saturated at the Int64 edges (non-finite as 0).
    public static func unixSeconds(_ date: Date) -> Int64 {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        guard seconds.isFinite else { return 0 }
        if seconds >= 9.223372036854775807e18 { return .max }
        if seconds <= -9.223372036854775808e18 { return .min }
        return Int64(seconds)
    }
}
