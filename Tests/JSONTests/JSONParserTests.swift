import Testing

@testable import JSON

@Suite("JSON parser")
struct JSONParserTests {
    @Test func parsesTheFirebaseCreateBody() throws {
        let value = try JSONParser.parse(
            #"{"fid":"dIsVQ2QVRT-TsRovAPrE3U","authVersion":"FIS_v2","appId":"1:123:web:ab","sdkVersion":"w:0.6.24"}"#)
        #expect(value["fid"]?.stringValue == "dIsVQ2QVRT-TsRovAPrE3U")
        #expect(value["missing"] == nil)
    }

    @Test func roundTripsThroughTheEncoder() throws {
        let text = #"{"a":[1,2.5,-3e2,true,false,null],"b":"q\"\\\n\u0001é😀","c":{}}"#
        let value = try JSONParser.parse(text)
        #expect(try JSONParser.parse(value.encoded()) == value)
        #expect(value["b"]?.stringValue == "q\"\\\n\u{1}é😀")
    }

    @Test func keepsLargeIntegersExact() throws {
        let value = try JSONParser.parse(#"{"n":190369711113}"#)
        #expect(value["n"]?.int64Value == 190369711113)
    }

    @Test func surrogatePairs() throws {
        #expect(try JSONParser.parse(#""\ud83d\ude00""#).stringValue == "😀")
        #expect(throws: JSONParseError.self) { try JSONParser.parse(#""\ud83d""#) }
        #expect(throws: JSONParseError.self) { try JSONParser.parse(#""\ude00""#) }
    }

    /// Strings are read by a plain-ASCII fast path that hands over to the general one at the first escape, control
    /// byte or non-ASCII byte: whatever comes after the plain prefix must read the same as without it.
    @Test func aPlainPrefixThenAnyTailReadsWhole() throws {
        let tails = ["", "\\n", "\\\"", "é", "😀", "\\u00e9", "\\ud83d\\ude00", "/", "\\/", "~"]
        for prefix in ["", "a", "abcdefghijklmno", "abcdefghijklmnop", String(repeating: "x", count: 300)] {
            for tail in tails {
                let text = "\"" + prefix + tail + "z\""
                let expected = try #require(JSONParser.parse("\"" + tail + "\"").stringValue)
                #expect(try JSONParser.parse(text).stringValue == prefix + expected + "z", "\(text)")
            }
            #expect(throws: JSONParseError.self) { try JSONParser.parse("\"" + prefix + "\u{01}\"") }
            #expect(throws: JSONParseError.self) { try JSONParser.parse("\"" + prefix) }
            #expect(throws: JSONParseError.self) { try JSONParser.parse(Array(("\"" + prefix).utf8) + [0xFF, 0x22]) }
        }
    }

    static let invalid: [String] = [
        "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "01", "1.", ".5", "-", "1e", "+1",
        "\"abc", "\"\u{01}\"", "\"\\x\"", "tru", "nul", "[1 2]", "{\"a\":1}{}", "{\"a\":1,\"a\":2}", "NaN", "'a'",
    ]

    @Test(arguments: invalid)
    func rejectsInvalidDocuments(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSONParser.parse(text) }
    }

    @Test func rejectsInvalidUTF8() {
        #expect(throws: JSONParseError.self) { try JSONParser.parse([0x22, 0xC0, 0xAF, 0x22]) }
        #expect(throws: JSONParseError.self) { try JSONParser.parse([0x22, 0xED, 0xA0, 0x80, 0x22]) }
        #expect(throws: JSONParseError.self) { try JSONParser.parse([0x22, 0xFF, 0x22]) }
    }

    @Test func limitsNesting() {
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        #expect(throws: JSONParseError.self) { try JSONParser.parse(deep) }
        let ok = String(repeating: "[", count: 32) + String(repeating: "]", count: 32)
        #expect((try? JSONParser.parse(ok)) != nil)
    }

    /// Fuzz: random bytes and mutations of valid documents never crash, and whatever parses re-encodes to an
    /// equal value.
    @Test func fuzzNeverCrashesAndRoundTrips() {
        var rng = SystemRandomNumberGenerator()
        let seeds = Array(#"{"a":[1,{"b":"c\u00e9"},true,null,-0.5e3],"d":"\\\""}"#.utf8)
        let alphabet = Array("{}[]\",:0123456789-+.eEtrufalsn \\u".utf8)
        for _ in 0..<5000 {
            var bytes = seeds
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                let i = Int.random(in: 0..<bytes.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0:
                    bytes[i] =
                        Bool.random(using: &rng)
                        ? alphabet.randomElement(using: &rng)! : UInt8.random(in: 0...255, using: &rng)
                case 1: bytes.remove(at: i)
                default: bytes.insert(alphabet.randomElement(using: &rng)!, at: i)
                }
                if bytes.isEmpty { bytes = [0x30] }
            }
            if let value = try? JSONParser.parse(bytes) {
                #expect((try? JSONParser.parse(value.encoded())) == value)
            }
        }
    }

    /// The string writer passes over eight bytes at a time: every byte that needs an escape, at every offset of a
    /// word and across word edges, among multi-byte characters, is escaped exactly as byte by byte, and the text
    /// parses back to the string.
    @Test func theWordAtATimeEscapeAgreesWithByteByByte() throws {
        var rng = SystemRandomNumberGenerator()
        let specials: [UInt8] = [0x00, 0x01, 0x09, 0x0a, 0x0d, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7e, 0x7f]
        let pieces = specials.map { String(decoding: [$0], as: UTF8.self) } + ["a", "Z", "é", "€", "𝄞", "\u{80}", "\u{9f}"]
        for _ in 0..<4000 {
            var text = ""
            for _ in 0..<Int.random(in: 0...40, using: &rng) {
                text += Bool.random(using: &rng) ? "abcdefgh" : pieces.randomElement(using: &rng)!
            }
            var reference: [UInt8] = [0x22]
            for byte in text.utf8 {
                switch byte {
                case 0x22: reference += [0x5c, 0x22]
                case 0x5c: reference += [0x5c, 0x5c]
                case 0x0a: reference += [0x5c, UInt8(ascii: "n")]
                case 0x0d: reference += [0x5c, UInt8(ascii: "r")]
                case 0x09: reference += [0x5c, UInt8(ascii: "t")]
                case 0..<0x20, 0x7f:
                    let hex = Array("0123456789abcdef".utf8)
                    reference += Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0xf)]]
                default: reference.append(byte)
                }
            }
            reference.append(0x22)
            let written = JSONValue.string(text).encoded()
            #expect(written == reference, "\(text.debugDescription)")
            #expect(try JSONParser.parse(written) == .string(text))
        }
    }
}
