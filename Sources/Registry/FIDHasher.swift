import Crypto

/// The keyed hash under which a FID is remembered once its clear text is gone: retired FIDs, overdue-deletion
/// reports, receipts looked up after a purge. One key per deployment, kept by the store (``SecretStore``).
public struct FIDHasher: Sendable {
    private let key: [UInt8]

    public init(key: [UInt8]) { self.key = key }

    /// The FID an import gives a device its source knew by `seed` only (an APNs token, a web push endpoint, a player
    /// ID): keyed, so a re-run lands on the same installation and nobody can derive it from the token.
    public func derivedFID(projectID: String, seed: String) -> String {
        var bytes = Array(HMACSHA256.authenticate(Array(("import-fid\u{0}" + projectID + "\u{0}" + seed).utf8), key: key).prefix(17))
        bytes[0] = 0b0111_0000 | (bytes[0] & 0b0000_1111)
        return String(Base64URL.encode(bytes).prefix(22))
    }

    /// The registration token an import gives a device without an FCM token: its FID and a keyed suffix.
    public func derivedToken(fid: String, projectID: String, seed: String) -> String {
        fid + ":imp_" + Base64URL.encode(HMACSHA256.authenticate(Array(("import-token\u{0}" + projectID + "\u{0}" + seed).utf8), key: key))
    }

    /// HMAC-SHA256 over `projectID NUL fid`: the same FID in two projects hashes apart.
    public func hash(projectID: String, fid: String) -> [UInt8] {
        HMACSHA256.authenticate(Array((projectID + "\u{0}" + fid).utf8), key: key)
    }
}

/// Secrets the service generates for itself and shares between replicas through its store.
public protocol SecretStore: Sendable {
    /// The named secret; the first caller creates it (32 random bytes), every later one reads the same bytes.
    func secret(named name: String) async throws -> [UInt8]
}
