import COpenSSL

/// Seals secrets for storage with AES-256-GCM under a master key the database never sees.
///
/// A sealed value is `enc1:` and the base64url of a fresh 12-byte nonce, the ciphertext and the 16-byte tag. The
/// `context` (what the secret is: `signing_keys:<kid>`, …) is authenticated as associated data, so a sealed value
/// moved to another row does not open there.
public struct SecretBox: Sendable {
    public static let prefix = "enc1:"
    private let key: [UInt8]

    /// - Throws: ``CryptoError`` when `key` is not 32 bytes.
    public init(key: [UInt8]) throws {
        guard key.count == 32 else { throw CryptoError(.invalidKey, "the master key must be 32 bytes") }
        self.key = key
    }

    /// True when `text` is a sealed value (and not a secret stored in clear by an older version).
    public static func isSealed(_ text: String) -> Bool { text.hasPrefix(prefix) }

    public func seal(_ plaintext: [UInt8], context: String) throws -> String {
        let nonce = try SecureRandom.bytes(12)
        guard let ctx = EVP_CIPHER_CTX_new() else { throw CryptoError(.invalidKey, "EVP_CIPHER_CTX_new failed") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        guard EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nil, key, nonce) == 1 else {
            throw CryptoError(.invalidKey, "AES-GCM init failed")
        }
        var length: Int32 = 0
        let aad = Array(context.utf8)
        guard aad.isEmpty || EVP_EncryptUpdate(ctx, nil, &length, aad, Int32(aad.count)) == 1 else {
            throw CryptoError(.invalidKey, "AES-GCM associated data failed")
        }
        var out = [UInt8](repeating: 0, count: plaintext.count + 16)
        guard EVP_EncryptUpdate(ctx, &out, &length, plaintext, Int32(plaintext.count)) == 1 else {
            throw CryptoError(.invalidKey, "AES-GCM encryption failed")
        }
        var total = Int(length)
        guard out.withUnsafeMutableBufferPointer({ EVP_EncryptFinal_ex(ctx, $0.baseAddress! + total, &length) }) == 1
        else { throw CryptoError(.invalidKey, "AES-GCM final failed") }
        total += Int(length)
        var tag = [UInt8](repeating: 0, count: 16)
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else {
            throw CryptoError(.invalidKey, "AES-GCM tag failed")
        }
        return SecretBox.prefix + Base64URL.encode(nonce + out.prefix(total) + tag)
    }

    public func seal(_ plaintext: String, context: String) throws -> String {
        try seal(Array(plaintext.utf8), context: context)
    }

    /// - Throws: ``CryptoError`` `.openFailed` when the value was sealed under another key or context, or altered.
    public func open(_ sealed: String, context: String) throws -> [UInt8] {
        guard SecretBox.isSealed(sealed), let bytes = Base64URL.decode(sealed.dropFirst(SecretBox.prefix.count)),
            bytes.count >= 28
        else { throw CryptoError(.openFailed, "not a sealed value") }
        let nonce = Array(bytes.prefix(12))
        var tag = Array(bytes.suffix(16))
        let ciphertext = Array(bytes[12..<(bytes.count - 16)])
        guard let ctx = EVP_CIPHER_CTX_new() else { throw CryptoError(.openFailed, "EVP_CIPHER_CTX_new failed") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        guard EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nil, key, nonce) == 1 else {
            throw CryptoError(.openFailed, "AES-GCM init failed")
        }
        var length: Int32 = 0
        let aad = Array(context.utf8)
        guard aad.isEmpty || EVP_DecryptUpdate(ctx, nil, &length, aad, Int32(aad.count)) == 1 else {
            throw CryptoError(.openFailed, "AES-GCM associated data failed")
        }
        var out = [UInt8](repeating: 0, count: ciphertext.count + 16)
        guard EVP_DecryptUpdate(ctx, &out, &length, ciphertext, Int32(ciphertext.count)) == 1 else {
            throw CryptoError(.openFailed, "AES-GCM decryption failed")
        }
        var total = Int(length)
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, &tag) == 1,
            out.withUnsafeMutableBufferPointer({ EVP_DecryptFinal_ex(ctx, $0.baseAddress! + total, &length) }) == 1
        else { throw CryptoError(.openFailed, "the sealed value does not open with this key") }
        total += Int(length)
        return Array(out.prefix(total))
    }

    public func openString(_ sealed: String, context: String) throws -> String {
        String(decoding: try open(sealed, context: context), as: UTF8.self)
    }
}
