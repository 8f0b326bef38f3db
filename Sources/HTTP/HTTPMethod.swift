/// The request methods the service routes (RFC 9110 §9 and PATCH, RFC 5789). Any other token is still a valid
/// request method on the wire; it is simply never routed, and counted as `OTHER`.
public enum HTTPMethod: String, Sendable, CaseIterable {
    case GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE, CONNECT

    /// The method as a bounded metrics label: its name, or `OTHER`.
    public static func label(_ method: String) -> String { HTTPMethod(rawValue: method)?.rawValue ?? "OTHER" }
}

/// Google's canonical error codes for the statuses the HTTP layer itself answers with.
public enum CanonicalStatus {
    public static func code(for status: Int) -> String {
        switch status {
        case 400, 405, 411, 414, 415, 417, 431, 505: return "INVALID_ARGUMENT"
        case 401: return "UNAUTHENTICATED"
        case 403: return "PERMISSION_DENIED"
        case 404: return "NOT_FOUND"
        case 408: return "DEADLINE_EXCEEDED"
        case 409: return "ABORTED"
        case 413: return "OUT_OF_RANGE"
        case 429: return "RESOURCE_EXHAUSTED"
        case 500: return "INTERNAL"
        case 503: return "UNAVAILABLE"
        default: return "UNKNOWN"
        }
    }
}
