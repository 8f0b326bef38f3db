/// The few protocol-buffer wire-format operations the GCM check-in needs (`AndroidCheckinRequest` in,
/// `AndroidCheckinResponse` out), by hand: varints, fixed64 and length-delimited fields (proto2 wire format).
/// Public for the fuzz target (`fuzz/Sources/FuzzProtobuf`), which reads what any client may send.
public enum Protobuf {
    public enum Value: Equatable, Sendable {
        case varint(UInt64)
        case fixed64(UInt64)
        case bytes([UInt8])
        case fixed32(UInt32)
    }

    public struct DecodeError: Error {}

    /// The top-level fields of `bytes`, in order.
    ///
    /// - Throws: ``DecodeError`` for truncated or malformed input (the caller answers 400).
    public static func fields(_ bytes: [UInt8]) throws -> [(number: Int, value: Value)] {
        var index = 0
        var fields: [(Int, Value)] = []
        func varint() throws -> UInt64 {
            var result: UInt64 = 0
            for shift in stride(from: 0, to: 64, by: 7) {
                guard index < bytes.count else { throw DecodeError() }
                let byte = bytes[index]
                index += 1
                result |= UInt64(byte & 0x7f) << UInt64(shift)
                if byte & 0x80 == 0 { return result }
            }
            throw DecodeError()
        }
        func fixed(_ count: Int) throws -> UInt64 {
            guard index + count <= bytes.count else { throw DecodeError() }
            var value: UInt64 = 0
            for i in (0..<count).reversed() { value = value << 8 | UInt64(bytes[index + i]) }
            index += count
            return value
        }
        while index < bytes.count {
            let key = try varint()
            guard key >> 3 > 0, key >> 3 <= 536_870_911 else { throw DecodeError() }
            let number = Int(key >> 3)
            switch key & 7 {
            case 0: fields.append((number, .varint(try varint())))
            case 1: fields.append((number, .fixed64(try fixed(8))))
            case 2:
                let length = try varint()
                guard length <= UInt64(bytes.count - index) else { throw DecodeError() }
                fields.append((number, .bytes(Array(bytes[index..<index + Int(length)]))))
                index += Int(length)
            case 5: fields.append((number, .fixed32(UInt32(try fixed(4)))))
            default: throw DecodeError()
            }
        }
        return fields
    }

    /// Encodes fields in order.
    public struct Writer {
        public private(set) var bytes: [UInt8] = []

        public init() {}

        private mutating func varint(_ value: UInt64) {
            var rest = value
            while rest >= 0x80 {
                bytes.append(UInt8(rest & 0x7f) | 0x80)
                rest >>= 7
            }
            bytes.append(UInt8(rest))
        }

        public mutating func varint(_ number: Int, _ value: UInt64) {
            varint(UInt64(number) << 3)
            varint(value)
        }

        public mutating func fixed64(_ number: Int, _ value: UInt64) {
            varint(UInt64(number) << 3 | 1)
            for i in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(8 * i))) }
        }

        public mutating func fixed32(_ number: Int, _ value: UInt32) {
            varint(UInt64(number) << 3 | 5)
            for i in 0..<4 { bytes.append(UInt8(truncatingIfNeeded: value >> UInt32(8 * i))) }
        }

        public mutating func string(_ number: Int, _ value: String) { self.bytes(number, Array(value.utf8)) }

        public mutating func bytes(_ number: Int, _ value: [UInt8]) {
            varint(UInt64(number) << 3 | 2)
            varint(UInt64(value.count))
            bytes += value
        }
    }
}
