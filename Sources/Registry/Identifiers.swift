import Crypto

/// Formats and generators of the identifiers Firebase clients expect.
public enum Identifiers {
    /// Firebase installation IDs: 22 characters (new format) or 11 (migrated Instance IDs) of URL-safe base64,
    /// first character `c`–`f` (JS SDK `VALID_FID_PATTERN`, IID migration).
    public static func isValidFID(_ fid: String) -> Bool {
        let bytes = Array(fid.utf8)
        guard bytes.count == 22 || bytes.count == 11 else { return false }
        guard let first = bytes.first, (UInt8(ascii: "c")...UInt8(ascii: "f")).contains(first) else { return false }
        return bytes.allSatisfy(isBase64URLChar)
    }

    /// A fresh FID: 17 random bytes, high nibble of the first forced to `0111`, base64url, first 22 characters.
    public static func newFID() throws -> String {
        var bytes = try SecureRandom.bytes(17)
        bytes[0] = 0b0111_0000 | (bytes[0] & 0b0000_1111)
        return String(Base64URL.encode(bytes).prefix(22))
    }

    /// Refresh tokens: `3_` and 256 random bits (the prefix real FIS tokens carry).
    public static func newRefreshToken() throws -> String { "3_" + Base64URL.encode(try SecureRandom.bytes(32)) }

    /// Server keys: `trs_` and 256 random bits.
    public static func newServerKey() throws -> String { "trs_" + Base64URL.encode(try SecureRandom.bytes(32)) }

    /// API keys in Firebase's shape: `AIza` and 35 URL-safe characters (Android checks `\AA[\w-]{38}\z`).
    public static func newAPIKey() throws -> String {
        "AIza" + String(Base64URL.encode(try SecureRandom.bytes(27)).prefix(35))
    }

    /// App IDs in Firebase's shape: `1:<projectNumber>:<platform>:<16 hex>`.
    public static func newAppID(projectNumber: Int64, platform: Platform) throws -> String {
        "1:\(projectNumber):\(platform.rawValue):\(Hex.encode(try SecureRandom.bytes(8)))"
    }

    /// Firebase project IDs: 6–30 characters, lower-case letters, digits and hyphens, starting with a letter.
    public static func isValidProjectID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard (6...30).contains(bytes.count), let first = bytes.first, (97...122).contains(first),
            bytes.last != UInt8(ascii: "-")
        else { return false }
        return bytes.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == UInt8(ascii: "-") }
    }

    /// A project number as a path names it: decimal digits that fit in an Int64.
    public static func isProjectNumber(_ text: String) -> Bool {
        (1...19).contains(text.utf8.count) && text.utf8.allSatisfy { (48...57).contains($0) } && Int64(text) != nil
    }

    public static func isValidAPIKey(_ key: String) -> Bool {
        let bytes = Array(key.utf8)
        return bytes.count == 39 && key.hasPrefix("A") && bytes.allSatisfy(isBase64URLChar)
    }

    public static func isValidAppID(_ id: String) -> Bool {
        let parts = id.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "1" && Int64(parts[1]) != nil
            && Platform(rawValue: String(parts[2])) != nil
            && (1...64).contains(parts[3].count) && parts[3].utf8.allSatisfy(isBase64URLChar)
    }

    /// A browser origin, lower-cased: `scheme://host[:port]`, no path, query or user part. Any scheme a page may be
    /// served from: `https` and `http`, and those of apps that run the web SDK in a web view or an extension
    /// (`capacitor://localhost`, `ionic://localhost`, `chrome-extension://<id>`, `moz-extension://<id>`). The host is
    /// a name or an IPv6 literal in brackets (`http://[::1]:5173`). The opaque origin `null` (a sandboxed frame, a
    /// `file:` page) is never one: any page can make itself that.
    public static func webOrigin(_ text: String) -> String? {
        let lowered = text.lowercased()
        guard lowered.utf8.count <= 300, let separator = lowered.range(of: "://") else { return nil }
        let scheme = lowered[..<separator.lowerBound].utf8
        guard (1...32).contains(scheme.count), let first = scheme.first, (97...122).contains(first),
            scheme.allSatisfy({ isSchemeChar($0) })
        else { return nil }
        let rest = lowered[separator.upperBound...]
        let host: Substring
        let port: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return nil }
            host = rest[rest.index(after: rest.startIndex)..<close]
            guard host.utf8.allSatisfy({ isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") }),
                host.contains(":")
            else { return nil }
            let after = rest[rest.index(after: close)...]
            guard after.isEmpty || after.hasPrefix(":") else { return nil }
            port = after.isEmpty ? nil : after.dropFirst()
        } else {
            let parts = rest.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            host = parts[0]
            guard host.utf8.allSatisfy({ isBase64URLChar($0) || $0 == UInt8(ascii: ".") }) else { return nil }
            port = parts.count == 2 ? parts[1] : nil
        }
        guard (1...253).contains(host.utf8.count) else { return nil }
        if let port {
            guard (1...5).contains(port.utf8.count), port.utf8.allSatisfy({ (48...57).contains($0) }),
                let number = UInt16(port), number > 0
            else { return nil }
        }
        return lowered
    }

    private static func isSchemeChar(_ c: UInt8) -> Bool {
        (97...122).contains(c) || (48...57).contains(c) || c == UInt8(ascii: "+") || c == UInt8(ascii: "-")
            || c == UInt8(ascii: ".")
    }

    private static func isHexDigit(_ c: UInt8) -> Bool { (48...57).contains(c) || (97...102).contains(c) }

    static func isBase64URLChar(_ c: UInt8) -> Bool {
        (65...90).contains(c) || (97...122).contains(c) || (48...57).contains(c) || c == UInt8(ascii: "-")
            || c == UInt8(ascii: "_")
    }

    /// True when every character is printable ASCII or non-control Unicode, and the text is within `limit` bytes.
    public static func isPlainText(_ text: String, limit: Int = .max) -> Bool {
        text.utf8.count <= limit
            && text.unicodeScalars.allSatisfy {
                $0.value >= 0x20 && $0.value != 0x7f && !(0x80..<0xa0).contains($0.value)
            }
    }
}
