/// The protocol version of a request.
public enum HTTPVersion: Sendable, Equatable {
    case http1_0
    case http1_1

    public var text: String { self == .http1_0 ? "HTTP/1.0" : "HTTP/1.1" }
}

/// One parsed request: the head as received and the whole body, already de-chunked and decompressed.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The request target as sent (origin form: path and query).
    public var target: String
    public var version: HTTPVersion
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// The peer's address: `a.b.c.d:port`, or `[v6]:port` for an IPv6 peer.
    public var remoteAddress: String = ""

    /// The peer's address without its port (an IPv6 address without its brackets).
    public var remoteHost: String { HTTPRequest.host(of: remoteAddress) }

    /// `a.b.c.d` of `a.b.c.d:port`, `v6` of `[v6]:port`.
    static func host(of remote: String) -> String {
        if remote.hasPrefix("["), let close = remote.firstIndex(of: "]") {
            return String(remote[remote.index(after: remote.startIndex)..<close])
        }
        guard let colon = remote.lastIndex(of: ":") else { return remote }
        return String(remote[..<colon])
    }

    public init(
        method: String, target: String, version: HTTPVersion = .http1_1, headers: HTTPHeaders = [:],
        body: [UInt8] = []
    ) {
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.body = body
    }

    /// The path part of the target, still percent-encoded.
    /// Searched by byte, not by `Character`: a request target is ASCII, and grapheme breaking cost more than the
    /// rest of the routing.
    public var path: Substring {
        if let q = target.utf8.firstIndex(of: UInt8(ascii: "?")) { return target[..<q] }
        return target[...]
    }

    /// The query part of the target without `?`, still percent-encoded; empty when there is none.
    public var rawQuery: Substring {
        if let q = target.utf8.firstIndex(of: UInt8(ascii: "?")) { return target[target.utf8.index(after: q)...] }
        return ""
    }

    /// Query parameters in order, percent-decoded (`+` as a space); a parameter that does not decode is left out.
    public var queryItems: [(name: String, value: String)] { HTTPRequest.formItems(rawQuery) }

    /// The most pairs a form body is read for: no route takes more than a handful of fields.
    public static let maxFormItems = 64

    /// The most bytes a form body is read for: the largest form a route takes (a signed JWT assertion, a register
    /// call's fields) is a few kilobytes.
    public static let maxFormBytes = 64 * 1024

    /// The body's `application/x-www-form-urlencoded` pairs in order; nil when the body is over ``maxFormBytes``, is
    /// not UTF-8 or holds more than ``maxFormItems`` pairs. Counted before any is decoded: a megabyte of `a&a&…` (a
    /// kilobyte gzipped) is one scan for `&`, not half a million pairs built on the event loop.
    public var formItems: [(name: String, value: String)]? {
        guard body.count <= Self.maxFormBytes, body.count(where: { $0 == UInt8(ascii: "&") }) < Self.maxFormItems * 2
        else { return nil }
        guard let items = body.withUnsafeBufferPointer({ HTTPRequest.formItems(bytes: $0, strict: true) }) else {
            return nil
        }
        return items.count <= Self.maxFormItems ? items : nil
    }

    /// `name=value&…` pairs, percent-decoded (`+` as a space), as queries and form bodies carry them; a pair that
    /// does not decode to UTF-8 is left out.
    public static func formItems(_ text: Substring) -> [(name: String, value: String)] {
        var text = text
        return text.withUTF8 { formItems(bytes: $0, strict: false) } ?? []
    }

    /// The pairs of `bytes`, worked on as bytes (no per-character walk: a form value may be 64 KiB). `strict`: nil
    /// when a pair does not decode, instead of leaving it out.
    static func formItems(bytes: UnsafeBufferPointer<UInt8>, strict: Bool) -> [(name: String, value: String)]? {
        var items: [(name: String, value: String)] = []
        for pair in bytes.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let equals = pair.firstIndex(of: UInt8(ascii: "="))
            let name = pair[pair.startIndex..<(equals ?? pair.endIndex)]
            let value = equals.map { pair[pair.index(after: $0)..<pair.endIndex] } ?? pair[pair.endIndex..<pair.endIndex]
            guard let name = PercentDecoding.decodeForm(name), let value = PercentDecoding.decodeForm(value) else {
                if strict { return nil }
                continue
            }
            items.append((name, value))
        }
        return items
    }

    /// The first query value for any of `names` (so `topicName` and `topic_name` are read alike).
    public func query(_ names: String...) -> String? {
        let items = queryItems
        for name in names { if let v = items.first(where: { $0.name == name })?.value { return v } }
        return nil
    }

    /// Whether the connection stays open after this request, by version and `Connection` header.
    public var keepAlive: Bool {
        let tokens = headers.values("connection").flatMap { $0.lowercased().split(separator: ",") }
            .map { $0.trimmingCharacters(in: " \t") }
        switch version {
        case .http1_1: return !tokens.contains("close")
        case .http1_0: return tokens.contains("keep-alive")
        }
    }
}

extension StringProtocol {
    /// The text without leading and trailing bytes from `set`, an ASCII set such as HTTP's `" \t"` (no Foundation
    /// needed). By byte, as HTTP's optional whitespace is bytes: no set of `Character`s is built a call.
    public func trimmingCharacters(in set: String) -> String {
        let text = Substring(self)
        var start = text.utf8.startIndex
        var end = text.utf8.endIndex
        while start < end, set.utf8.contains(text.utf8[start]) { start = text.utf8.index(after: start) }
        while end > start, set.utf8.contains(text.utf8[text.utf8.index(before: end)]) {
            end = text.utf8.index(before: end)
        }
        return String(decoding: text.utf8[start..<end], as: UTF8.self)
    }

    /// What follows `prefix` (ASCII, compared without case, as an HTTP scheme such as `Bearer ` is), or nil.
    public func dropping(caseInsensitivePrefix prefix: String) -> Substring? {
        let text = Substring(self)
        var i = text.utf8.startIndex
        for expected in prefix.utf8 {
            guard i < text.utf8.endIndex, Self.asciiLower(text.utf8[i]) == Self.asciiLower(expected) else { return nil }
            i = text.utf8.index(after: i)
        }
        return Substring(text.utf8[i...])
    }

    private static func asciiLower(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 : byte
    }
}

/// Percent-decoding of a URL component, done exactly once.
public enum PercentDecoding {
    /// Decodes `%XX` escapes; nil when an escape is malformed or the result is not UTF-8.
    ///
    /// - Parameter literalStrayPercent: a `%` that does not start two hex digits stays a `%` (the WHATWG URL
    ///   Standard's percent-decode), as a path segment needs: Android puts topic names (which may hold `%`) into
    ///   paths without encoding them (`TopicSubscriptionClient.java`).
    public static func decode(_ text: some StringProtocol, literalStrayPercent: Bool = false) -> String? {
        // Most segments have no escape: they become a String with no byte array on the way.
        guard text.utf8.contains(UInt8(ascii: "%")) else { return String(text) }
        return Array(text.utf8).withUnsafeBufferPointer {
            decode(bytes: $0[...], plusIsSpace: false, literalStrayPercent: literalStrayPercent)
        }
    }

    /// Decodes a form component: `+` is a space and `%XX` an escape; nil when an escape is malformed or the result
    /// is not UTF-8.
    static func decodeForm(_ bytes: Slice<UnsafeBufferPointer<UInt8>>) -> String? {
        decode(bytes: bytes, plusIsSpace: true, literalStrayPercent: false)
    }

    /// The one decoder of both: `%XX` escapes, `+` as a space when `plusIsSpace`, a stray `%` itself when
    /// `literalStrayPercent` (nil otherwise), and nil for a result that is not UTF-8.
    private static func decode(
        bytes: Slice<UnsafeBufferPointer<UInt8>>, plusIsSpace: Bool, literalStrayPercent: Bool
    ) -> String? {
        var out = [UInt8]()
        out.reserveCapacity(bytes.count)
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let c = bytes[i]
            if c == UInt8(ascii: "%") {
                guard bytes.endIndex - i > 2, let hi = hex(bytes[i + 1]), let lo = hex(bytes[i + 2]) else {
                    guard literalStrayPercent else { return nil }
                    out.append(c)
                    i += 1
                    continue
                }
                out.append(hi << 4 | lo)
                i += 3
            } else {
                out.append(plusIsSpace && c == UInt8(ascii: "+") ? UInt8(ascii: " ") : c)
                i += 1
            }
        }
        return String(validating: out, as: UTF8.self)
    }

    private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
