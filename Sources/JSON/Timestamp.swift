import Foundation

/// RFC 3339 timestamps in UTC with microseconds, as Google APIs print them.
public enum Timestamp {
    public static func rfc3339(_ date: Date) -> String {
        var out = [UInt8]()
        out.reserveCapacity(27)
        appendRFC3339(date, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// The RFC 3339 text appended as bytes (no quotes; nothing in it needs escaping in JSON): this runs once per row
    /// when a topic's members are streamed.
    public static func appendRFC3339(_ date: Date, to out: inout [UInt8]) {
        // Years 0001-9999 only (what RFC 3339 can write): a date outside, or not finite, is written at the edge.
        let raw = (date.timeIntervalSince1970 * 1_000_000).rounded(.down)
        let micros = raw.isFinite ? Int64(min(max(raw, -62_135_596_800_000_000), 253_402_300_799_999_999)) : 0
        let seconds = micros >= 0 ? micros / 1_000_000 : (micros - 999_999) / 1_000_000
        let fraction = Int(micros - Int64(seconds) * 1_000_000)
        let days = Int(seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400)
        let second = Int(seconds) - days * 86_400
        let (year, month, day) = civil(days: days)
        digits(year, 4, &out)
        out.append(UInt8(ascii: "-"))
        digits(month, 2, &out)
        out.append(UInt8(ascii: "-"))
        digits(day, 2, &out)
        out.append(UInt8(ascii: "T"))
        digits(second / 3600, 2, &out)
        out.append(UInt8(ascii: ":"))
        digits(second / 60 % 60, 2, &out)
        out.append(UInt8(ascii: ":"))
        digits(second % 60, 2, &out)
        out.append(UInt8(ascii: "."))
        digits(fraction, 6, &out)
        out.append(UInt8(ascii: "Z"))
    }

    /// `value` (0 or more) in decimal, zero-padded to at least `width` digits (at most 19, the digits of `Int.max`):
    /// for writers of fixed-format text.
    /// Written from the most significant digit, so nothing is reversed after (this runs seven times a row of a
    /// streamed page of targets).
    public static func digits(_ value: Int, _ width: Int, _ out: inout [UInt8]) {
        let value = max(0, value)
        var scale = 1
        var count = 1
        while count < min(width, 19) || value / scale >= 10 {
            scale *= 10
            count += 1
        }
        while scale > 0 {
            out.append(UInt8(ascii: "0") + UInt8(value / scale % 10))
            scale /= 10
        }
    }

    /// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's `civil_from_days`): what
    /// `gmtime_r` computes, without its time-zone machinery, once per row of a streamed page.
    static func civil(days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// Parses RFC 3339 (`2026-01-15T01:30:15.01Z`, `…+02:00`); nil when malformed.
    public static func parse(_ text: String) -> Date? {
        let c = Array(text.utf8)
        guard (20...40).contains(c.count), c[4] == UInt8(ascii: "-"), c[7] == UInt8(ascii: "-"),
            c[10] == UInt8(ascii: "T") || c[10] == UInt8(ascii: "t"), c[13] == UInt8(ascii: ":"),
            c[16] == UInt8(ascii: ":")
        else { return nil }
        func num(_ from: Int, _ len: Int) -> Int? {
            var v = 0
            for i in from..<from + len {
                guard i < c.count, (48...57).contains(c[i]) else { return nil }
                v = v * 10 + Int(c[i] - 48)
            }
            return v
        }
        guard let year = num(0, 4), let month = num(5, 2), let day = num(8, 2), let hour = num(11, 2),
            let minute = num(14, 2),
            let second = num(17, 2), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60,
            second < 61
        else { return nil }
        var i = 19
        var fraction = 0.0
        if i < c.count, c[i] == UInt8(ascii: ".") {
            i += 1
            var scale = 0.1
            let start = i
            while i < c.count, (48...57).contains(c[i]) {
                fraction += Double(c[i] - 48) * scale
                scale /= 10
                i += 1
            }
            guard i > start, i - start <= 9 else { return nil }
        }
        var offset = 0
        guard i < c.count else { return nil }
        if c[i] == UInt8(ascii: "Z") || c[i] == UInt8(ascii: "z") {
            i += 1
        } else if c[i] == UInt8(ascii: "+") || c[i] == UInt8(ascii: "-") {
            guard i + 6 == c.count, c[i + 3] == UInt8(ascii: ":"), let hh = num(i + 1, 2), let mm = num(i + 4, 2),
                hh < 24, mm < 60
            else { return nil }
            offset = (c[i] == UInt8(ascii: "-") ? -1 : 1) * (hh * 3600 + mm * 60)
            i += 6
        } else {
            return nil
        }
        guard i == c.count else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = Double(timegm(&parts) - offset) + fraction
        // An offset can move a time out of the years 1-9999 (`9999-12-31T23:59:59-12:00` is in the year 10000, UTC):
        // PostgreSQL stores it, but writes it back as a year of five digits, or BC, which no reader here parses.
        guard seconds >= Timestamp.earliest, seconds < Timestamp.end else { return nil }
        return Date(timeIntervalSince1970: seconds)
    }

    /// The first instant of the year 1, UTC, in seconds since 1970.
    public static let earliest: Double = -62_135_596_800
    /// The first instant of the year 10000, UTC: every time is before it (`…23:59:59.9999999Z`, and a leap second
    /// `23:59:60`, are not).
    public static let end: Double = 253_402_300_800
}
