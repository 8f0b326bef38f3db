import COpenSSL

/// A P-256 private key that signs ES256 (ECDSA with SHA-256) and emits JWS `r||s` signatures.
///
/// `@unchecked Sendable`: the wrapped `EVP_PKEY*` and its signing context are never mutated after creation (each
/// signature works on a copy of the context), and OpenSSL 3 allows concurrent sign and verify operations on one key.
public final class ES256PrivateKey: @unchecked Sendable {
    private let prepared: PreparedKey
    var pkey: OpaquePointer { prepared.pkey }
    /// The matching public key.
    public let publicKey: ES256PublicKey

    /// Takes ownership of `pkey`.
    private init(pkey: OpaquePointer) throws {
        prepared = try PreparedKey(pkey, signing: true)
        publicKey = try ES256PublicKey(pkey: pkey)
    }

    /// Generates a fresh key pair.
    public static func generate() throws -> ES256PrivateKey {
        guard let key = shim_p256_generate() else { throw CryptoError(.invalidKey, "P-256 key generation failed") }
        return try ES256PrivateKey(pkey: key)
    }

    /// Loads a PEM-encoded private key (PKCS#8 or SEC1); it must be on the P-256 curve.
    public convenience init(pem: String) throws {
        let bytes = Array(pem.utf8)
        let key: OpaquePointer? = bytes.withUnsafeBufferPointer { buf in
            guard let bio = BIO_new_mem_buf(buf.baseAddress, Int32(buf.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let key else { throw CryptoError(.invalidKey, "not a PEM private key") }
        guard ES256PrivateKey.isP256(key) else {
            EVP_PKEY_free(key)
            throw CryptoError(.invalidKey, "the key is not a P-256 EC key")
        }
        try self.init(pkey: key)
    }

    /// Builds a key from its JWK parts: the public point `x`, `y` and the private scalar `d` (32 bytes each).
    public convenience init(x: [UInt8], y: [UInt8], d: [UInt8]) throws {
        guard x.count == 32, y.count == 32, d.count == 32 else {
            throw CryptoError(.invalidKey, "P-256 parts are 32 bytes")
        }
        let point = [0x04] + x + y
        guard let key = shim_p256_from_components(point, point.count, d, d.count) else {
            throw CryptoError(.invalidKey, "invalid P-256 private key")
        }
        try self.init(pkey: key)
    }

    static func isP256(_ key: OpaquePointer) -> Bool {
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_EC else { return false }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, &name, name.count, &length) == 1 else {
            return false
        }
        let group = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return group == "prime256v1" || group == "P-256"
    }

    /// The key in PKCS#8 PEM form.
    public func pemRepresentation() throws -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw CryptoError(.invalidKey, "BIO_new failed") }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1 else {
            throw CryptoError(.invalidKey, "PEM_write_bio_PrivateKey failed")
        }
        var pointer: UnsafeMutablePointer<CChar>?
        let length = shim_BIO_get_mem_data(bio, &pointer)
        guard let pointer, length > 0 else { throw CryptoError(.invalidKey, "empty PEM") }
        return String(decoding: UnsafeRawBufferPointer(start: pointer, count: length), as: UTF8.self)
    }

    /// Signs `message` and returns the 64-byte JWS signature `r||s`.
    public func sign(_ message: some Collection<UInt8>) throws -> [UInt8] {
        guard let ctx = prepared.copy() else { throw CryptoError(.signFailed, "cannot copy the signing context") }
        defer { EVP_MD_CTX_free(ctx) }
        let input = Array(message)
        var der = [UInt8](repeating: 0, count: 80)
        var derLength = der.count
        let ok = input.withUnsafeBufferPointer { m in
            EVP_DigestSign(ctx, &der, &derLength, m.baseAddress, m.count)
        }
        guard ok == 1 else { throw CryptoError(.signFailed, "EVP_DigestSign failed") }
        var raw = [UInt8](repeating: 0, count: 64)
        guard shim_ecdsa_der_to_raw(der, derLength, &raw) == 1 else {
            throw CryptoError(.signFailed, "DER signature conversion failed")
        }
        return raw
    }
}

/// A P-256 public key that verifies ES256 JWS signatures.
///
/// `@unchecked Sendable`: immutable `EVP_PKEY*` and verifying context (each verification works on a copy), safe for
/// concurrent verification in OpenSSL 3.
public final class ES256PublicKey: @unchecked Sendable {
    private let prepared: PreparedKey
    /// The affine coordinates, 32 bytes each.
    public let x: [UInt8]
    public let y: [UInt8]

    convenience init(pkey source: OpaquePointer) throws {
        var point = [UInt8](repeating: 0, count: 65)
        var length = 0
        guard EVP_PKEY_get_octet_string_param(source, OSSL_PKEY_PARAM_PUB_KEY, &point, 65, &length) == 1,
            length == 65, point[0] == 0x04
        else { throw CryptoError(.invalidKey, "cannot read the public point") }
        try self.init(x: Array(point[1..<33]), y: Array(point[33..<65]))
    }

    /// Builds a public key from its affine coordinates (32 bytes each).
    public init(x: [UInt8], y: [UInt8]) throws {
        guard x.count == 32, y.count == 32 else { throw CryptoError(.invalidKey, "P-256 coordinates are 32 bytes") }
        let point = [0x04] + x + y
        guard let key = shim_p256_from_components(point, point.count, nil, 0) else {
            throw CryptoError(.invalidKey, "the point is not on P-256")
        }
        prepared = try PreparedKey(key, signing: false)
        self.x = x
        self.y = y
    }

    /// True when `signature` (64 bytes, `r||s`) is a valid ES256 signature of `message`.
    public func verify(signature: some Collection<UInt8>, for message: some Collection<UInt8>) -> Bool {
        let raw = Array(signature)
        guard raw.count == 64 else { return false }
        var der = [UInt8](repeating: 0, count: 80)
        let derLength = shim_ecdsa_raw_to_der(raw, &der, Int32(der.count))
        guard derLength > 0, let ctx = prepared.copy() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        let input = Array(message)
        return input.withUnsafeBufferPointer { m in
            EVP_DigestVerify(ctx, der, Int(derLength), m.baseAddress, m.count)
        } == 1
    }

    /// The RFC 7638 thumbprint: SHA-256 of the canonical JWK members, base64url-encoded.
    public var thumbprint: String {
        let canonical =
            "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"\(Base64URL.encode(x))\",\"y\":\"\(Base64URL.encode(y))\"}"
        return Base64URL.encode(SHA256.hash(canonical))
    }

    /// The public JWK as a JSON object text, with `kid`, `use` and `alg`.
    public func jwkJSON(kid: String) -> String {
        "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"\(Base64URL.encode(x))\",\"y\":\"\(Base64URL.encode(y))\","
            + "\"use\":\"sig\",\"alg\":\"ES256\",\"kid\":\"\(kid)\"}"
    }
}

/// A P-256 key with an `EVP_MD_CTX` initialised once for ES256 (SHA-256) with it, for signing or for verifying; both are
/// freed with it. Each operation starts from a copy of the context, which skips the algorithm fetch by name that
/// `EVP_DigestSignInit` does on every call in OpenSSL 3 (measured here: 29.6 µs a signature initialised each time,
/// 21.4 µs from a copy). `@unchecked Sendable`: neither pointer is mutated after creation.
private final class PreparedKey: @unchecked Sendable {
    let pkey: OpaquePointer
    private let context: OpaquePointer

    /// Takes ownership of `pkey` (freed here when OpenSSL refuses it).
    init(_ pkey: OpaquePointer, signing: Bool) throws {
        guard let context = EVP_MD_CTX_new() else {
            EVP_PKEY_free(pkey)
            throw CryptoError(.invalidKey, "EVP_MD_CTX_new failed")
        }
        let initialised =
            signing
            ? EVP_DigestSignInit(context, nil, EVP_sha256(), nil, pkey)
            : EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, pkey)
        guard initialised == 1 else {
            EVP_MD_CTX_free(context)
            EVP_PKEY_free(pkey)
            throw CryptoError(.invalidKey, signing ? "the key cannot sign ES256" : "the key cannot verify ES256")
        }
        self.pkey = pkey
        self.context = context
    }

    deinit {
        EVP_MD_CTX_free(context)
        EVP_PKEY_free(pkey)
    }

    /// A copy of the prepared context for one operation (the caller frees it), or nil.
    func copy() -> OpaquePointer? {
        guard let copy = EVP_MD_CTX_new() else { return nil }
        guard EVP_MD_CTX_copy_ex(copy, context) == 1 else {
            EVP_MD_CTX_free(copy)
            return nil
        }
        return copy
    }
}
