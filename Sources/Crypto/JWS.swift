/// JWS compact serialization (RFC 7515) for ES256.
public enum JWS {
    /// The parts of a compact JWS, decoded but not verified.
    public struct Parts: Sendable {
        public let header: [UInt8]
        public let payload: [UInt8]
        public let signature: [UInt8]
        /// `base64url(header) + "." + base64url(payload)`, the bytes the signature covers.
        public let signingInput: [UInt8]
    }

    /// Signs `header` and `payload` (both JSON bytes) and returns the compact serialization.
    public static func sign(header: [UInt8], payload: [UInt8], key: ES256PrivateKey) throws -> String {
        let input = Base64URL.encode(header) + "." + Base64URL.encode(payload)
        let signature = try key.sign(Array(input.utf8))
        return input + "." + Base64URL.encode(signature)
    }

    /// Splits and decodes a compact JWS; nil when it does not have three base64url parts.
    public static func parse(_ token: some StringProtocol) -> Parts? {
        let segments = token.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3,
            let header = Base64URL.decode(segments[0]),
            let payload = Base64URL.decode(segments[1]),
            let signature = Base64URL.decode(segments[2])
        else { return nil }
        let input = Array(segments[0].utf8) + [UInt8(ascii: ".")] + Array(segments[1].utf8)
        return Parts(header: header, payload: payload, signature: signature, signingInput: input)
    }
}
