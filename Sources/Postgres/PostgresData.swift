import Foundation

/// A Swift value that can be bound as a query parameter, in PostgreSQL's text format.
public protocol PostgresEncodable: Sendable {
    /// The parameter text, or nil for SQL NULL.
    var postgresText: String? { get }
}

/// A Swift value that can be read from a column in PostgreSQL's text format.
public protocol PostgresDecodable {
    init?(postgresText: String)
}

extension String: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { self }
    public init?(postgresText: String) { self = postgresText }
}

extension Substring: PostgresEncodable {
    public var postgresText: String? { String(self) }
}

extension Int: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    public init?(postgresText: String) { self.init(postgresText) }
}

extension Int64: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    public init?(postgresText: String) { self.init(postgresText) }
}

extension Int32: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    public init?(postgresText: String) { self.init(postgresText) }
}

extension Double: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    public init?(postgresText: String) { self.init(postgresText) }
}

extension Bool: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { self ? "t" : "f" }
    public init?(postgresText: String) {
        switch postgresText {
        case "t", "true": self = true
        case "f", "false": self = false
        default: return nil
        }
    }
}

extension Optional: PostgresEncodable where Wrapped: PostgresEncodable {
    public var postgresText: String? { self?.postgresText }
}

/// `bytea` values, bound and read in hex form (`\x…`).
public struct ByteA: PostgresEncodable, PostgresDecodable, Hashable {
    public let bytes: [UInt8]
    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    private static let digits = Array("0123456789abcdef".utf8)

    public var postgresText: String? {
        var out: [UInt8] = [UInt8(ascii: "\\"), UInt8(ascii: "x")]
        for b in bytes {
            out.append(ByteA.digits[Int(b >> 4)])
            out.append(ByteA.digits[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    public init?(postgresText: String) {
        // Read in place, as timestamps are: no copy of the text's bytes before decoding them.
        var text = postgresText
        guard let bytes = text.withUTF8({ ByteA.parseHex($0) }) else { return nil }
        self.bytes = bytes
    }

    private static func parseHex(_ chars: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        guard chars.count >= 2, chars[0] == UInt8(ascii: "\\"), chars[1] == UInt8(ascii: "x"), chars.count % 2 == 0
        else {
            return nil
        }
        var out = [UInt8]()
        out.reserveCapacity(chars.count / 2 - 1)
        var i = 2
        while i < chars.count {
            guard let hi = ByteA.nibble(chars[i]), let lo = ByteA.nibble(chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: return nil
        }
    }
}

/// `text[]` parameters, for `= ANY($1)` and `unnest($1)` batches.
public struct TextArray: PostgresEncodable {
    public let values: [String]
    public init(_ values: [String]) { self.values = values }

    public var postgresText: String? { NullableTextArray(values).postgresText }
}

/// A `text[]` parameter whose elements may be NULL (a column of a batch staged with `unnest`).
public struct NullableTextArray: PostgresEncodable {
    public let values: [String?]
    public init(_ values: [String?]) { self.values = values }

    /// Built byte by byte: a batch of an import encodes some 200,000 of these elements.
    public var postgresText: String? {
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(values.count * 24)
        for (i, v) in values.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            guard let v else {
                out.append(contentsOf: [78, 85, 76, 76])  // NULL
                continue
            }
            out.append(UInt8(ascii: "\""))
            for byte in v.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
                out.append(byte)
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }
}

/// Timestamps travel as `timestamptz` text in UTC with microseconds; sessions run with `TimeZone=UTC`.
extension Date: PostgresEncodable, PostgresDecodable {
    /// The instant to the microsecond (rounded down), as `J<Julian day number> HH:MM:SS.ffffff+00`: PostgreSQL reads a
    /// Julian day as a date, so no calendar is computed here (this runs for every timestamp of every write).
    /// Instants before Julian day 0 (4714 BC) or after the year 280,000 are PostgreSQL's `-infinity` and `infinity`.
    public var postgresText: String? {
        let seconds = timeIntervalSince1970
        guard seconds >= -210_866_803_200, seconds < 8.8e12 else { return seconds > 0 ? "infinity" : "-infinity" }
        let micros = Int64((seconds * 1_000_000).rounded(.down))
        let perDay: Int64 = 86_400_000_000
        let days = micros >= 0 ? micros / perDay : (micros + 1) / perDay - 1
        let ofDay = Int(micros - days * perDay)
        var out: [UInt8] = [UInt8(ascii: "J")]
        out.reserveCapacity(32)
        out.append(contentsOf: String(days + 2_440_588).utf8)
        // Fixed widths: each field's digits from the most significant.
        func field(_ value: Int, scale: Int) {
            var scale = scale
            while scale > 0 {
                out.append(UInt8(ascii: "0") + UInt8(value / scale % 10))
                scale /= 10
            }
        }
        out.append(UInt8(ascii: " "))
        field(ofDay / 3_600_000_000, scale: 10)
        out.append(UInt8(ascii: ":"))
        field(ofDay / 60_000_000 % 60, scale: 10)
        out.append(UInt8(ascii: ":"))
        field(ofDay / 1_000_000 % 60, scale: 10)
        out.append(UInt8(ascii: "."))
        field(ofDay % 1_000_000, scale: 100_000)
        out.append(contentsOf: "+00".utf8)
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses `YYYY-MM-DD HH:MM:SS[.ffffff]+00` (or `Z`, `±HH[:MM]`).
    public init?(postgresText text: String) {
        // Read in place: a copy of the bytes into an array was an allocation for every timestamp of every row read
        // (once per target of a streamed page).
        var text = text
        guard let date = text.withUTF8({ Date.parsePostgres($0) }) else { return nil }
        self = date
    }

    static func parsePostgres(_ c: UnsafeBufferPointer<UInt8>) -> Date? {
        guard c.count >= 19 else { return nil }
        func num(_ from: Int, _ len: Int) -> Int? {
            var v = 0
            for i in from..<from + len {
                guard i < c.count, c[i] >= 48, c[i] <= 57 else { return nil }
                v = v * 10 + Int(c[i] - 48)
            }
            return v
        }
        guard let year = num(0, 4), let month = num(5, 2), let day = num(8, 2), let hour = num(11, 2),
            let minute = num(14, 2), let second = num(17, 2)
        else { return nil }
        var i = 19
        // The fraction as whole microseconds (PostgreSQL prints at most six digits), then one division.
        var micros = 0
        if i < c.count, c[i] == UInt8(ascii: ".") {
            i += 1
            var scale = 100_000
            while i < c.count, c[i] >= 48, c[i] <= 57 {
                micros += Int(c[i] - 48) * scale
                scale /= 10
                i += 1
            }
        }
        var offset = 0
        if i < c.count, c[i] == UInt8(ascii: "+") || c[i] == UInt8(ascii: "-") {
            let sign = c[i] == UInt8(ascii: "-") ? -1 : 1
            guard let hh = num(i + 1, 2) else { return nil }
            var mm = 0
            if i + 3 < c.count, c[i + 3] == UInt8(ascii: ":"), let m = num(i + 4, 2) { mm = m }
            offset = sign * (hh * 3600 + mm * 60)
        }
        guard (1...12).contains(month), (1...31).contains(day) else { return nil }
        let epoch = Date.days(year: year, month: month, day: day) * 86_400 + hour * 3600 + minute * 60 + second
        return Date(timeIntervalSince1970: Double(epoch - offset) + Double(micros) / 1_000_000)
    }

    /// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`): what `timegm`
    /// computes for the valid dates PostgreSQL prints, without its normalisation, once per row read.
    static func days(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
