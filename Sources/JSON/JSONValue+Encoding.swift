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
            // Runs of bytes that need no escape (nearly all of them) are copied whole, not byte by byte.
            var start = 0
            for i in 0..<bytes.count {
                let byte = bytes[i]
                guard byte < 0x20 || byte == 0x22 || byte == 0x5c || byte == 0x7f else { continue }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<i]))
                writeEscape(byte, into: &out)
                start = i + 1
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<bytes.count]))
        }
        out.append(UInt8(ascii: "\""))
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
