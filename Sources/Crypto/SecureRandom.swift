import COpenSSL

/// Cryptographically secure random bytes from OpenSSL's DRBG.
public enum SecureRandom {
    /// Returns `count` random bytes.
    ///
    /// - Throws: ``CryptoError`` when the generator fails, which OpenSSL reports only when it cannot seed itself.
    public static func bytes(_ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard count == 0 || RAND_bytes(&out, Int32(count)) == 1 else {
            throw CryptoError(.randomFailed, "RAND_bytes failed")
        }
        return out
    }
}
