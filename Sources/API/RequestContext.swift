import HTTP
import JSON
import Registry

/// A request on its way through a handler: the parsed request, its path parameters, and its id.
public struct RequestContext: Sendable {
    public let request: HTTPRequest
    public let parameters: [String: String]
    public let requestID: String
    public let template: String
    /// The request's W3C trace (the caller's, or a new one).
    public let trace: TraceContext

    /// A path parameter the route template declares.
    public func parameter(_ name: String) -> String { parameters[name] ?? "" }

    /// The body as a JSON object; an empty body counts as `{}` when `allowEmpty`.
    ///
    /// JSON is parsed whatever the `Content-Type` says (firebase-messaging sends JSON as `text/plain`).
    public func jsonObject(allowEmpty: Bool = false) throws -> JSONValue {
        if request.body.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0a || $0 == 0x0d }) {
            if allowEmpty { return .object([]) }
            throw APIError.invalid("the request body must be a JSON object")
        }
        let value = try JSONParser.parse(request.body)
        guard case .object = value else {
            throw APIError.invalid("the request body must be a JSON object, not \(value.typeName)")
        }
        return value
    }

    /// The body as a JSON object or array (a hook may post one item or a batch).
    public func jsonObjectOrArray() throws -> JSONValue {
        let value = try JSONParser.parse(request.body)
        switch value {
        case .object, .array: return value
        default: throw APIError.invalid("the request body must be a JSON object or array, not \(value.typeName)")
        }
    }

    public func header(_ name: String) -> String? { request.headers[name] }
}

/// Reads fields of a JSON object with type and size checks; every error names the field.
public struct FieldReader {
    public let object: JSONValue
    public let path: String

    public init(_ object: JSONValue, path: String = "") {
        self.object = object
        self.path = path
    }

    func name(_ key: String) -> String { path.isEmpty ? key : path + "." + key }

    /// A string member. Absent or null gives nil; `required` makes that an error.
    public func string(_ key: String, required: Bool = false, maxBytes: Int = 1024, allowEmpty: Bool = true) throws
        -> String?
    {
        guard let value = object[key], !value.isNull else {
            if required { throw APIError.invalid("\(name(key)): required field is missing") }
            return nil
        }
        guard let s = value.stringValue else {
            throw APIError.invalid("\(name(key)): must be a string, not \(value.typeName)")
        }
        guard s.utf8.count <= maxBytes else { throw APIError.invalid("\(name(key)): longer than \(maxBytes) bytes") }
        // No stored or sent text can hold NUL (PostgreSQL's text cannot; C strings end there).
        guard !s.utf8.contains(0) else { throw APIError.invalid("\(name(key)): must not contain NUL") }
        if !allowEmpty && s.isEmpty { throw APIError.invalid("\(name(key)): must not be empty") }
        return s
    }

    /// A string of printable characters only (no control characters).
    public func text(_ key: String, required: Bool = false, maxBytes: Int = 256) throws -> String? {
        guard let s = try string(key, required: required, maxBytes: maxBytes) else { return nil }
        guard Identifiers.isPlainText(s) else {
            throw APIError.invalid("\(name(key)): must not contain control characters")
        }
        return s
    }

    public func bool(_ key: String, required: Bool = false) throws -> Bool? {
        guard let value = object[key], !value.isNull else {
            if required { throw APIError.invalid("\(name(key)): required field is missing") }
            return nil
        }
        guard let b = value.boolValue else {
            throw APIError.invalid("\(name(key)): must be a boolean, not \(value.typeName)")
        }
        return b
    }

    /// A nested object member, as a reader; nil when absent or null.
    public func object(_ key: String, required: Bool = false) throws -> FieldReader? {
        guard let value = object[key], !value.isNull else {
            if required { throw APIError.invalid("\(name(key)): required field is missing") }
            return nil
        }
        guard case .object = value else {
            throw APIError.invalid("\(name(key)): must be an object, not \(value.typeName)")
        }
        return FieldReader(value, path: name(key))
    }

    /// A whole-number member within `range`; nil when absent or null.
    public func integer(_ key: String, in range: ClosedRange<Int>) throws -> Int? {
        guard let value = object[key], !value.isNull else { return nil }
        guard let n = value.int64Value, let int = Int(exactly: n), range.contains(int) else {
            throw APIError.invalid("\(name(key)): must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return int
    }

    public func array(_ key: String, required: Bool = false, maxCount: Int) throws -> [JSONValue]? {
        guard let value = object[key], !value.isNull else {
            if required { throw APIError.invalid("\(name(key)): required field is missing") }
            return nil
        }
        guard let items = value.arrayValue else {
            throw APIError.invalid("\(name(key)): must be an array, not \(value.typeName)")
        }
        guard items.count <= maxCount else { throw APIError.invalid("\(name(key)): more than \(maxCount) items") }
        return items
    }
}

/// JSON responses.
extension HTTPResponse {
    public static func json(_ value: JSONValue, status: Int = 200) -> HTTPResponse {
        HTTPResponse(
            status: status, headers: ["content-type": "application/json; charset=utf-8"], body: value.encoded())
    }
}
