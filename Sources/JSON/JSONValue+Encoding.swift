extension JSONValue {
    /// The compact JSON text of the value, as UTF-8 bytes.
    public func encoded() -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(128)
        write(into: &out)
        return out
    }

    /// The compact JSON text of the value.
    public var text: String { String(decoding: encoded(), as: UTF8.self) }

    func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case let .bool(b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case let .number(n): out.append(contentsOf: n.utf8)
        case let .string(s): JSONValue.writeString(s, into: &out)
        case let .array(items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case let .object(members):
            out.append(UInt8(ascii: "{"))
            for (i, (key, value)) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hex = Array("0123456789abcdef".utf8)

    /// Appends `s` as a JSON string literal (quoted and escaped) to `out`: for writers that build JSON text
    /// directly, such as the request log.
    public static func appendString(_ s: String, to out: inout [UInt8]) { writeString(s, into: &out) }

    static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var text = s
        text.withUTF8 { bytes in
            // Runs of bytes that need no escape (nearly all of them) are copied whole, not byte by byte, and are
            // found eight bytes at a time: a word with none of the bytes to escape is passed over in one test.
            var start = 0
            var i = 0
            let count = bytes.count
            if let base = bytes.baseAddress {
                while i + 8 <= count {
                    if !mayNeedEscape(UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)) {
                        i += 8
                        continue
                    }
                    for j in i..<(i + 8) where needsEscape(bytes[j]) {
                        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<j]))
                        writeEscape(bytes[j], into: &out)
                        start = j + 1
                    }
                    i += 8
                }
            }
            while i < count {
                if needsEscape(bytes[i]) {
                    out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<i]))
                    writeEscape(bytes[i], into: &out)
                    start = i + 1
                }
                i += 1
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<count]))
        }
        out.append(UInt8(ascii: "\""))
    }

    @inline(__always)
    static func needsEscape(_ byte: UInt8) -> Bool { byte < 0x20 || byte == 0x22 || byte == 0x5c || byte == 0x7f }

    /// False only when none of the word's eight bytes needs an escape (a control byte, `"`, `\\` or DEL); true may be
    /// a false alarm (a borrow), which the byte-wise check then clears.
    @inline(__always)
    static func mayNeedEscape(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        @inline(__always) func hasZero(_ v: UInt64) -> Bool { (v &- ones) & ~v & highs != 0 }
        let control = (word &- ones &* 0x20) & ~word & highs != 0
        return control || hasZero(word ^ (ones &* 0x22)) || hasZero(word ^ (ones &* 0x5c)) || hasZero(word ^ (ones &* 0x7f))
    }

    private static func writeEscape(_ byte: UInt8, into out: inout [UInt8]) {
        switch byte {
        case UInt8(ascii: "\""): out.append(contentsOf: [0x5c, 0x22])
        case UInt8(ascii: "\\"): out.append(contentsOf: [0x5c, 0x5c])
        case 0x0a: out.append(contentsOf: [0x5c, UInt8(ascii: "n")])
        case 0x0d: out.append(contentsOf: [0x5c, UInt8(ascii: "r")])
        case 0x09: out.append(contentsOf: [0x5c, UInt8(ascii: "t")])
        default:
            out.append(contentsOf: [0x5c, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0xf)])
        }
    }

}
