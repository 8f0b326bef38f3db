import Foundation
import Glibc
import Testing

@testable import JSON

/// The calendar arithmetic that replaced `gmtime_r` in the row-by-row writer, held against it.
@Suite("Timestamps")
struct TimestampTests {
    @Test func civilDatesAgreeWithGmtime() {
        var generator = SystemRandomNumberGenerator()
        // Every day from 1900 to 2200, then random seconds from year 1 to 9999.
        var samples: [Int] = Array(stride(from: -2_208_988_800, through: 7_258_118_400, by: 86_400))
        for _ in 0..<20_000 { samples.append(Int.random(in: -62_135_596_800...253_402_300_799, using: &generator)) }
        for seconds in samples {
            var t = time_t(seconds)
            var parts = tm()
            gmtime_r(&t, &parts)
            let expected = String(
                format: "%04d-%02d-%02dT%02d:%02d:%02d.000000Z", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
            let written = Timestamp.rfc3339(Date(timeIntervalSince1970: Double(seconds)))
            if written != expected {
                Issue.record("\(seconds): \(written), gmtime says \(expected)")
                return
            }
        }
    }

    @Test func fractionsAndPaddingAreWritten() {
        #expect(Timestamp.rfc3339(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000000Z")
        #expect(Timestamp.rfc3339(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59.500000Z")
        #expect(Timestamp.rfc3339(Date(timeIntervalSince1970: 951_782_400.25)) == "2000-02-29T00:00:00.250000Z")
        var out: [UInt8] = []
        Timestamp.digits(7, 4, &out)
        Timestamp.digits(12_345, 2, &out)
        Timestamp.digits(0, 1, &out)
        Timestamp.digits(-3, 2, &out)
        #expect(String(decoding: out, as: UTF8.self) == "000712345000")
    }

    /// `digits` against `String(format:)` over random values and widths, the ends of `Int` included.
    @Test func digitsAgreeWithPrintf() {
        var generator = SystemRandomNumberGenerator()
        var samples: [Int] = [
            0, 1, 9, 10, 99, 100, 999_999, 1_000_000, Int.max, Int.max / 10, 1_000_000_000_000_000_000,
        ]
        for _ in 0..<5_000 { samples.append(Int.random(in: 0...Int.max, using: &generator) >> Int.random(in: 0...62)) }
        for value in samples {
            let width = Int.random(in: 1...22, using: &generator)
            var out: [UInt8] = []
            Timestamp.digits(value, width, &out)
            let expected = String(format: "%0\(min(width, 19))ld", value)
            if String(decoding: out, as: UTF8.self) != expected {
                Issue.record(
                    "digits(\(value), \(width)) wrote \(String(decoding: out, as: UTF8.self)), printf \(expected)")
                return
            }
        }
    }
}
