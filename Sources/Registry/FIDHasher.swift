import Crypto

/// The keyed hash under which a FID is remembered once its clear text is gone: retired FIDs, overdue-deletion
/// reports, receipts looked up after a purge. One key per deployment, kept by the store (``SecretStore``).
public struct FIDHasher: Sendable {
    private let key: [UInt8]

    public init(key: [UInt8]) { self.key = key }

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
