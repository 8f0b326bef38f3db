/// Matches a method and path against route templates such as
/// `/v1/projects/{project}/installations/{fid}/authTokens:generate` or `.../topicSubscriptions/{topic}:subscribe`.
///
/// Each path segment is percent-decoded exactly once, after splitting, so `%2F` inside a token never splits it.
/// One trailing slash is tolerated. When several templates match, the most specific wins: at the first segment
/// where they differ, a literal beats `{param}:verb`, which beats `{param}`.
///
/// The table is generic over what a route carries, but it matches through a non-generic core
/// (``RouteTable``), so no generic metadata is instantiated per request across module boundaries.
public struct Router<Handler: Sendable>: Sendable {
    private var table = RouteTable()
    private var handlers: [Handler] = []

    public init() {}

    public enum Match {
        case found(Handler, parameters: [String: String], template: String)
        case methodNotAllowed(allowed: [String])
        case notFound
        /// The path is not valid (bad percent-encoding, not UTF-8, not starting with `/`).
        case badPath(String)
    }

    /// Every registered (method, template) pair, in registration order.
    public var registered: [(method: String, template: String)] { table.registered }

    public mutating func add(_ method: String, _ template: String, _ handler: Handler) {
        table.add(method, template, index: handlers.count)
        handlers.append(handler)
    }

    public func match(method: String, path: some StringProtocol) -> Match {
        switch table.match(method: method, path: String(path)) {
        case let .found(index, parameters, template):
            return .found(handlers[index], parameters: parameters, template: template)
        case let .methodNotAllowed(allowed): return .methodNotAllowed(allowed: allowed)
        case .notFound: return .notFound
        case let .badPath(reason): return .badPath(reason)
        }
    }
}

/// The matching core of ``Router``: templates to route indices.
public struct RouteTable: Sendable {
    enum Segment: Sendable, Equatable {
        case literal(String)
        case param(String)
        case paramVerb(String, verb: String)

        var rank: Int {
            switch self {
            case .literal: return 3
            case .paramVerb: return 2
            case .param: return 1
            }
        }
    }

    struct Route: Sendable {
        let method: String
        let template: String
        let segments: [Segment]
        let index: Int
    }

    public enum Match {
        case found(Int, parameters: [String: String], template: String)
        case methodNotAllowed(allowed: [String])
        case notFound
        /// The path is not valid (bad percent-encoding, not UTF-8, not starting with `/`).
        case badPath(String)
    }

    private var routes: [Route] = []

    public init() {}

    /// Every registered (method, template) pair, in registration order.
    public var registered: [(method: String, template: String)] { routes.map { ($0.method, $0.template) } }

    public mutating func add(_ method: String, _ template: String, index: Int) {
        let segments = template.split(separator: "/", omittingEmptySubsequences: true).map { raw -> Segment in
            if raw.hasPrefix("{"), let close = raw.firstIndex(of: "}") {
                let name = String(raw[raw.index(after: raw.startIndex)..<close])
                let rest = raw[raw.index(after: close)...]
                if rest.isEmpty { return .param(name) }
                precondition(rest.hasPrefix(":"), "route template segment \(raw) must be {name} or {name}:verb")
                return .paramVerb(name, verb: String(rest.dropFirst()))
            }
            return .literal(String(raw))
        }
        routes.append(Route(method: method, template: template, segments: segments, index: index))
    }

    public func match(method: String, path: String) -> Match {
        // By byte: `/` is a delimiter wherever it appears, and grapheme breaking (the `Character` view) was the
        // largest part of matching.
        let slash = UInt8(ascii: "/")
        guard path.utf8.first == slash else { return .badPath("the path must start with '/'") }
        var trimmed = path.utf8[...]
        if trimmed.count > 1, trimmed.last == slash { trimmed = trimmed.dropLast() }
        let rawSegments =
            trimmed.count == 1 ? [] : trimmed.dropFirst().split(separator: slash, omittingEmptySubsequences: false)
        var segments: [String] = []
        segments.reserveCapacity(rawSegments.count)
        for raw in rawSegments {
            guard !raw.isEmpty else { return .notFound }
            guard let decoded = PercentDecoding.decode(Substring(raw)) else {
                return .badPath("the path has invalid percent-encoding")
            }
            segments.append(decoded)
        }
        // The most specific templates that match the path decide, whatever the method: a path that names a custom
        // verb (`…/{token}:sendability`) never falls back to a broader template (`…/{token}`) for another method.
        var candidates: [(route: Route, params: [String: String])] = []
        for route in routes where route.segments.count == segments.count {
            guard let params = RouteTable.bind(route.segments, to: segments) else { continue }
            if let first = candidates.first {
                if RouteTable.isMoreSpecific(route.segments, than: first.route.segments) {
                    candidates = [(route, params)]
                } else if !RouteTable.isMoreSpecific(first.route.segments, than: route.segments) {
                    candidates.append((route, params))
                }
            } else {
                candidates.append((route, params))
            }
        }
        if let hit = candidates.first(where: { $0.route.method == method })
            ?? (method == "HEAD" ? candidates.first(where: { $0.route.method == "GET" }) : nil)
        {
            return .found(hit.route.index, parameters: hit.params, template: hit.route.template)
        }
        guard !candidates.isEmpty else { return .notFound }
        var allowed: [String] = []
        for candidate in candidates where !allowed.contains(candidate.route.method) {
            allowed.append(candidate.route.method)
        }
        if allowed.contains("GET") && !allowed.contains("HEAD") { allowed.append("HEAD") }
        return .methodNotAllowed(allowed: allowed)
    }

    static func bind(_ template: [Segment], to segments: [String]) -> [String: String]? {
        var params: [String: String] = [:]
        for i in 0..<template.count {
            let value = segments[i]
            switch template[i] {
            case let .literal(text):
                guard text == value else { return nil }
            case let .param(name):
                params[name] = value
            case let .paramVerb(name, verb):
                guard let colon = value.lastIndex(of: ":"), value[value.index(after: colon)...] == verb,
                    colon > value.startIndex
                else { return nil }
                params[name] = String(value[..<colon])
            }
        }
        return params
    }

    static func isMoreSpecific(_ a: [Segment], than b: [Segment]) -> Bool {
        for i in 0..<min(a.count, b.count) where a[i].rank != b[i].rank { return a[i].rank > b[i].rank }
        return false
    }
}
