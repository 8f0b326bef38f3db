import HTTP
import JSON
import Registry

/// An error as the client sees it: Google-style JSON `{"error":{"code","message","status"}}`, where `code`
/// always equals the HTTP status (the JS SDK reads the body, not the status line).
public struct APIError: Error, Sendable {
    public let status: Int
    public let canonical: String
    public let message: String
    public var details: [JSONValue] = []
    public var headers: HTTPHeaders = [:]

    public init(_ status: Int, _ canonical: String, _ message: String) {
        self.status = status
        self.canonical = canonical
        self.message = message
    }

    public static func invalid(_ message: String) -> APIError { APIError(400, "INVALID_ARGUMENT", message) }
    public static func notFound(_ message: String) -> APIError { APIError(404, "NOT_FOUND", message) }
    public static func unauthenticated(_ message: String) -> APIError { APIError(401, "UNAUTHENTICATED", message) }
    public static func permissionDenied(_ message: String) -> APIError { APIError(403, "PERMISSION_DENIED", message) }

    /// 429 RESOURCE_EXHAUSTED with `Retry-After`: a limit of the caller's is reached for now.
    public static func exhausted(_ message: String, retryAfter seconds: Int) -> APIError {
        var error = APIError(429, "RESOURCE_EXHAUSTED", message)
        error.headers.add(name: "retry-after", value: String(seconds))
        return error
    }

    /// The one place where errors from every layer become statuses.
    public static func from(_ error: any Error) -> APIError {
        switch error {
        case let e as APIError:
            return e
        case let e as RegistryError:
            switch e.kind {
            case .invalidArgument: return APIError(400, "INVALID_ARGUMENT", e.message)
            case .unauthenticated: return APIError(401, "UNAUTHENTICATED", e.message)
            case .permissionDenied: return APIError(403, "PERMISSION_DENIED", e.message)
            case .notFound: return APIError(404, "NOT_FOUND", e.message)
            case .alreadyExists: return APIError(409, "ALREADY_EXISTS", e.message)
            case .failedPrecondition: return APIError(400, "FAILED_PRECONDITION", e.message)
            case .aborted: return APIError(409, "ABORTED", e.message)
            case .resourceExhausted: return APIError(429, "RESOURCE_EXHAUSTED", e.message)
            case .unavailable:
                var unavailable = APIError(503, "UNAVAILABLE", e.message)
                unavailable.headers.add(name: "retry-after", value: "1")
                return unavailable
            default: return APIError(500, "INTERNAL", "internal error")
            }
        case let e as JSONParseError:
            return APIError(400, "INVALID_ARGUMENT", "Invalid JSON payload received: \(e.description)")
        default:
            return APIError(500, "INTERNAL", "internal error")
        }
    }

    public var json: JSONValue {
        var error: [(String, JSONValue)] = [
            ("code", .int(status)), ("message", .string(message)), ("status", .string(canonical)),
        ]
        if !details.isEmpty { error.append(("details", .array(details))) }
        return .object([("error", .object(error))])
    }

    public var response: HTTPResponse {
        var headers = self.headers
        headers.add(name: "content-type", value: "application/json; charset=utf-8")
        return HTTPResponse(status: status, headers: headers, body: json.encoded())
    }
}
