import Foundation

/// RFC 3339 timestamps in UTC with microseconds, as Google APIs print them.
public enum Timestamp {
    public static func rfc3339(_ date: Date) -> String {
        let micros = Int64((date.timeIntervalSince1970 * 1_000_000).rounded(.down))
        var seconds = time_t(micros >= 0 ? micros / 1_000_000 : (micros - 999_999) / 1_000_000)
        let fraction = Int(micros - Int64(seconds) * 1_000_000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        // Written as bytes: this runs once per row when a topic's members are streamed.
        var out = [UInt8]()
        out.reserveCapacity(27)
        digits(Int(parts.tm_year) + 1900, 4, &out)
        out.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mon) + 1, 2, &out)
        out.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mday), 2, &out)
        out.append(UInt8(ascii: "T"))
        digits(Int(parts.tm_hour), 2, &out)
        out.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_min), 2, &out)
        out.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_sec), 2, &out)
        out.append(UInt8(ascii: "."))
        digits(fraction, 6, &out)
        out.append(UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }

    /// `value` (0 or more) in decimal, zero-padded to at least `width` digits: for writers of fixed-format text.
    public static func digits(_ value: Int, _ width: Int, _ out: inout [UInt8]) {
        let v = max(0, value)
        var divisor = 1
        var length = 1
        while divisor <= v / 10 {
            divisor *= 10
            length += 1
        }
        for _ in length..<max(length, width) { out.append(UInt8(ascii: "0")) }
        var rest = v
        while divisor > 0 {
            out.append(UInt8(ascii: "0") + UInt8(rest / divisor))
            rest %= divisor
            divisor /= 10
        }
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
        return Date(timeIntervalSince1970: Double(timegm(&parts) - offset) + fraction)
    }
}
