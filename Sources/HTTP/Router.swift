/// Matches a method and path against route templates such as
/// `/v1/projects/{project}/installations/{fid}/authTokens:generate` or `.../topicSubscriptions/{topic}:subscribe`.
///
/// Each path segment is percent-decoded exactly once, after splitting, so `%2F` inside a token never splits it; a `%`
/// that starts no escape is itself (WHATWG URL percent-decode), so a topic sent unencoded means what it says.
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
        /// The path is not valid (escapes that are not UTF-8 or encode a control character, not starting with `/`).
        case badPath(String)
    }

    /// Every registered (method, template) pair, in registration order.
    public var registered: [(method: String, template: String)] { table.registered }

    /// What each route carries, in registration order.
    public var handlersInOrder: [Handler] { handlers }

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
        /// The path is not valid (escapes that are not UTF-8 or encode a control character, not starting with `/`).
        case badPath(String)
    }

    private var routes: [Route] = []
    /// The positions in `routes` of the templates with each number of segments: a path is tested against those of
    /// its own length only (the routes of one length are a fifth of the table or less).
    private var byLength: [[Int]] = []

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
        while byLength.count <= segments.count { byLength.append([]) }
        byLength[segments.count].append(routes.count)
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
            guard let decoded = PercentDecoding.decode(Substring(raw), literalStrayPercent: true) else {
                return .badPath("the path's escapes do not decode to UTF-8")
            }
            // No route takes a control character in a segment (the raw target cannot hold one; an escape can): NUL,
            // CR or LF never reach a handler, a store or a log line.
            if raw.contains(UInt8(ascii: "%")), decoded.utf8.contains(where: { $0 < 0x20 || $0 == 0x7f }) {
                return .badPath("the path has a percent-encoded control character")
            }
            segments.append(decoded)
        }
        // The most specific templates that match the path decide, whatever the method: a path that names a custom
        // verb (`…/{token}:sendability`) never falls back to a broader template (`…/{token}`) for another method.
        // Templates are tested without allocating; only the winner's parameters are bound.
        guard segments.count < byLength.count else { return .notFound }
        var candidates: [Int] = []
        for position in byLength[segments.count] {
            let route = routes[position]
            guard RouteTable.matches(route.segments, segments) else { continue }
            if let first = candidates.first {
                if RouteTable.isMoreSpecific(route.segments, than: routes[first].segments) {
                    candidates.removeAll(keepingCapacity: true)
                    candidates.append(position)
                } else if !RouteTable.isMoreSpecific(routes[first].segments, than: route.segments) {
                    candidates.append(position)
                }
            } else {
                candidates.append(position)
            }
        }
        if let hit = candidates.first(where: { routes[$0].method == method })
            ?? (method == "HEAD" ? candidates.first(where: { routes[$0].method == "GET" }) : nil)
        {
            let route = routes[hit]
            return .found(
                route.index, parameters: RouteTable.bind(route.segments, to: segments), template: route.template)
        }
        guard !candidates.isEmpty else { return .notFound }
        var allowed: [String] = []
        for candidate in candidates where !allowed.contains(routes[candidate].method) {
            allowed.append(routes[candidate].method)
        }
        if allowed.contains("GET") && !allowed.contains("HEAD") { allowed.append("HEAD") }
        return .methodNotAllowed(allowed: allowed)
    }

    /// Whether `segments` fit the template: its literals equal, its verbs present after a non-empty parameter.
    static func matches(_ template: [Segment], _ segments: [String]) -> Bool {
        for i in 0..<template.count {
            switch template[i] {
            case let .literal(text):
                guard text == segments[i] else { return false }
            case .param:
                continue
            case let .paramVerb(_, verb):
                guard verbSplit(segments[i], verb: verb) != nil else { return false }
            }
        }
        return true
    }

    /// The parameters of a path that ``matches(_:_:)`` the template.
    static func bind(_ template: [Segment], to segments: [String]) -> [String: String] {
        var params: [String: String] = Dictionary(minimumCapacity: template.count)
        for i in 0..<template.count {
            switch template[i] {
            case .literal: continue
            case let .param(name): params[name] = segments[i]
            case let .paramVerb(name, verb): params[name] = verbSplit(segments[i], verb: verb).map { String($0) }
            }
        }
        return params
    }

    /// The parameter of `value` when it is `<non-empty parameter>:<verb>`.
    private static func verbSplit(_ value: String, verb: String) -> Substring? {
        guard let colon = value.utf8.lastIndex(of: UInt8(ascii: ":")), colon > value.startIndex,
            value.utf8[value.utf8.index(after: colon)...].elementsEqual(verb.utf8)
        else { return nil }
        return value[..<colon]
    }

    static func isMoreSpecific(_ a: [Segment], than b: [Segment]) -> Bool {
        for i in 0..<min(a.count, b.count) where a[i].rank != b[i].rank { return a[i].rank > b[i].rank }
        return false
    }
}
