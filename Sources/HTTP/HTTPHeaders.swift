/// Header fields in arrival order, with names lower-cased once when parsed so look-ups are case-insensitive.
public struct HTTPHeaders: Sendable, Sequence, ExpressibleByDictionaryLiteral {
    public private(set) var fields: [(name: String, value: String)] = []

    public init() {}

    public init(dictionaryLiteral elements: (String, String)...) {
        for (name, value) in elements { add(name: name, value: value) }
    }

    /// Room for `capacity` fields.
    init(capacity: Int) { fields.reserveCapacity(capacity) }

    /// Appends a field; the name is stored lower-cased.
    public mutating func add(name: String, value: String) {
        fields.append((HTTPHeaders.key(name), value))
    }

    /// Appends a field whose name is lower-case already (``lowercasedKey(_:)``).
    mutating func add(key: String, value: String) { fields.append((key, value)) }

    /// A header name's bytes (ASCII token characters) as a lower-case String, made in one pass: a name of up to 15
    /// bytes, as most are, is stored in the String itself and allocates nothing.
    static func lowercasedKey(_ name: ArraySlice<UInt8>) -> String {
        String(unsafeUninitializedCapacity: name.count) { buffer in
            for (offset, byte) in name.enumerated() {
                buffer[offset] = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte
            }
            return name.count
        }
    }

    /// Replaces every field named `name` with one field.
    public mutating func replaceOrAdd(name: String, value: String) {
        let key = HTTPHeaders.key(name)
        fields.removeAll { $0.name == key }
        fields.append((key, value))
    }

    /// The first value of the field named `name` (any case), or nil.
    public subscript(name: String) -> String? {
        let key = HTTPHeaders.key(name)
        return fields.first { $0.name == key }?.value
    }

    /// Every value of the field named `name`, in order.
    public func values(_ name: String) -> [String] {
        let key = HTTPHeaders.key(name)
        var found: [String] = []
        for field in fields where field.name == key { found.append(field.value) }
        return found
    }

    /// `name` lower-cased. Names in code are written lower-case already: those are used as they are, since
    /// lower-casing allocates and every request looks up several (a few per cent of a cheap route's CPU).
    static func key(_ name: String) -> String {
        for byte in name.utf8 where (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) || byte >= 0x80 {
            return name.lowercased()
        }
        return name
    }

    public func contains(_ name: String) -> Bool { self[name] != nil }

    public var count: Int { fields.count }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { fields.makeIterator() }
}
