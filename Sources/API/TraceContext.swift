/// W3C Trace Context (https://www.w3.org/TR/trace-context/): `traceparent: 00-<trace id>-<parent id>-<flags>`. A
/// request's trace is the caller's when its `traceparent` is valid, else a new one; the registry's own span gets a new
/// id. The trace id is logged with every line of the request, answered in the response's `traceparent`, and passed on
/// in the deletion notices the request causes.
public struct TraceContext: Sendable, Equatable {
    /// 32 lowercase hex digits, not all zero.
    public let traceID: String
    /// This service's span: 16 lowercase hex digits.
    public let spanID: String
    /// `01` when the caller sampled the trace, else `00`: only the flag this version defines is passed on.
    public let flags: String

    /// The `traceparent` this span sends on and answers with.
    public var header: String { "00-" + traceID + "-" + spanID + "-" + flags }

    /// The trace a request carries, or a new one.
    public static func of(_ header: String?) -> TraceContext {
        if let header, let parsed = parse(header) { return parsed }
        return TraceContext(traceID: RequestIDs.next() + RequestIDs.next(), spanID: RequestIDs.next(), flags: "00")
    }

    /// A valid `traceparent` (version 00 exactly; a later version's first four fields, followed by `-` if longer),
    /// with a new span of ours; nil for anything else.
    static func parse(_ header: String) -> TraceContext? {
        let bytes = Array(header.utf8)
        guard bytes.count >= 55, bytes.count <= 512, bytes[2] == 0x2d, bytes[35] == 0x2d, bytes[52] == 0x2d else {
            return nil
        }
        func hex(_ range: Range<Int>) -> Bool {
            bytes[range].allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
        }
        guard hex(0..<2), hex(3..<35), hex(36..<52), hex(53..<55) else { return nil }
        let version = String(decoding: bytes[0..<2], as: UTF8.self)
        guard version != "ff", version == "00" ? bytes.count == 55 : (bytes.count == 55 || bytes[55] == 0x2d) else {
            return nil
        }
        let trace = String(decoding: bytes[3..<35], as: UTF8.self)
        let parent = String(decoding: bytes[36..<52], as: UTF8.self)
        guard trace != String(repeating: "0", count: 32), parent != String(repeating: "0", count: 16) else { return nil }
        // The sampled flag is the low bit of the flags' last hex digit.
        let last = bytes[54] <= 0x39 ? bytes[54] - 0x30 : bytes[54] - 0x61 + 10
        return TraceContext(traceID: trace, spanID: RequestIDs.next(), flags: last & 1 == 1 ? "01" : "00")
    }
}
