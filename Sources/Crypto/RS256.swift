import COpenSSL

/// RSA keys for RS256 (RSASSA-PKCS1-v1_5 with SHA-256, RFC 7518 §3.3): the algorithm of the OAuth 2.0 JWT-bearer
/// assertions (RFC 7523) that Google service-account credentials sign.
///
/// `@unchecked Sendable`: the wrapped `EVP_PKEY*` is never mutated after creation, and OpenSSL 3 allows concurrent
/// sign and verify operations on one key.
public final class RSAKey: @unchecked Sendable {
    let pkey: OpaquePointer
    /// True when the private half is present.
    public let isPrivate: Bool

    private init(pkey: OpaquePointer, isPrivate: Bool) {
        self.pkey = pkey
        self.isPrivate = isPrivate
    }

    deinit { EVP_PKEY_free(pkey) }

    /// Generates a fresh key pair (2048 bits unless told otherwise).
    public static func generate(bits: UInt32 = 2048) throws -> RSAKey {
        guard let key = shim_rsa_generate(bits) else { throw CryptoError(.invalidKey, "RSA key generation failed") }
        return RSAKey(pkey: key, isPrivate: true)
    }

    /// Loads a PEM private key (PKCS#8 or PKCS#1) or public key (SubjectPublicKeyInfo); it must be RSA of at least
    /// 2048 bits.
    public convenience init(pem: String) throws {
        let bytes = Array(pem.utf8)
        let isPrivate = pem.contains("PRIVATE KEY-----")
        let key: OpaquePointer? = bytes.withUnsafeBufferPointer { buf in
            guard let bio = BIO_new_mem_buf(buf.baseAddress, Int32(buf.count)) else { return nil }
            defer { BIO_free(bio) }
            return isPrivate ? PEM_read_bio_PrivateKey(bio, nil, nil, nil) : PEM_read_bio_PUBKEY(bio, nil, nil, nil)
        }
        guard let key else { throw CryptoError(.invalidKey, "not a PEM RSA key") }
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA, EVP_PKEY_get_bits(key) >= 2048 else {
            EVP_PKEY_free(key)
            throw CryptoError(.invalidKey, "the key is not an RSA key of at least 2048 bits")
        }
        self.init(pkey: key, isPrivate: isPrivate)
    }

    /// The private key as PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), as service-account files carry it.
    public func privatePEM() throws -> String {
        guard isPrivate else { throw CryptoError(.invalidKey, "no private key") }
        return try RSAKey.pem { PEM_write_bio_PrivateKey($0, pkey, nil, nil, 0, nil, nil) }
    }

    /// The public key as SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    public func publicPEM() throws -> String { try RSAKey.pem { PEM_write_bio_PUBKEY($0, pkey) } }

    private static func pem(_ write: (OpaquePointer) -> Int32) throws -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw CryptoError(.invalidKey, "BIO_new failed") }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { throw CryptoError(.invalidKey, "PEM encoding failed") }
        var pointer: UnsafeMutablePointer<CChar>?
        let length = shim_BIO_get_mem_data(bio, &pointer)
        guard let pointer, length > 0 else { throw CryptoError(.invalidKey, "empty PEM") }
        return String(decoding: UnsafeRawBufferPointer(start: pointer, count: length), as: UTF8.self)
    }

    /// Signs `message` (RS256).
    public func sign(_ message: some Collection<UInt8>) throws -> [UInt8] {
        guard isPrivate, let ctx = EVP_MD_CTX_new() else { throw CryptoError(.signFailed, "cannot sign") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, pkey) == 1 else {
            throw CryptoError(.signFailed, "EVP_DigestSignInit failed")
        }
        let input = Array(message)
        var length = 0
        guard input.withUnsafeBufferPointer({ EVP_DigestSign(ctx, nil, &length, $0.baseAddress, $0.count) }) == 1 else {
            throw CryptoError(.signFailed, "EVP_DigestSign failed")
        }
        var signature = [UInt8](repeating: 0, count: length)
        guard
            input.withUnsafeBufferPointer({ EVP_DigestSign(ctx, &signature, &length, $0.baseAddress, $0.count) }) == 1
        else { throw CryptoError(.signFailed, "EVP_DigestSign failed") }
        return Array(signature.prefix(length))
    }

    /// True when `signature` is a valid RS256 signature of `message` under this key.
    public func verify(signature: some Collection<UInt8>, for message: some Collection<UInt8>) -> Bool {
        let raw = Array(signature)
        guard !raw.isEmpty, raw.count <= 1024, let ctx = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestVerifyInit(ctx, nil, EVP_sha256(), nil, pkey) == 1 else { return false }
        let input = Array(message)
        return input.withUnsafeBufferPointer { m in
            EVP_DigestVerify(ctx, raw, raw.count, m.baseAddress, m.count)
        } == 1
    }
}
