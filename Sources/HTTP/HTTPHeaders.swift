/// Header fields in arrival order, with names lower-cased once when parsed so look-ups are case-insensitive.
public struct HTTPHeaders: Sendable, Sequence, ExpressibleByDictionaryLiteral {
    public private(set) var fields: [(name: String, value: String)] = []

    public init() {}

    public init(dictionaryLiteral elements: (String, String)...) {
        for (name, value) in elements { add(name: name, value: value) }
    }

    /// Appends a field; the name is stored lower-cased.
    public mutating func add(name: String, value: String) {
        fields.append((name.lowercased(), value))
    }

    /// Replaces every field named `name` with one field.
    public mutating func replaceOrAdd(name: String, value: String) {
        let key = name.lowercased()
        fields.removeAll { $0.name == key }
        fields.append((key, value))
    }

    /// The first value of the field named `name` (any case), or nil.
    public subscript(name: String) -> String? {
        let key = name.lowercased()
        return fields.first { $0.name == key }?.value
    }

    /// Every value of the field named `name`, in order.
    public func values(_ name: String) -> [String] {
        let key = name.lowercased()
        return fields.filter { $0.name == key }.map(\.value)
    }

    public func contains(_ name: String) -> Bool { self[name] != nil }

    public var count: Int { fields.count }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { fields.makeIterator() }
}
