import Testing

@testable import Crypto

@Suite("Crypto vectors")
struct CryptoVectorTests {
    @Test func sha256FIPS180() {
        #expect(Hex.encode(SHA256.hash("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Hex.encode(SHA256.hash("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    /// RFC 4231 test cases 1, 2 and 6.
    @Test func hmacRFC4231() {
        let key1 = [UInt8](repeating: 0x0b, count: 20)
        #expect(
            Hex.encode(HMACSHA256.authenticate(Array("Hi There".utf8), key: key1))
                == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        #expect(
            Hex.encode(HMACSHA256.authenticate(Array("what do ya want for nothing?".utf8), key: Array("Jefe".utf8)))
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        let key6 = [UInt8](repeating: 0xaa, count: 131)
        #expect(
            Hex.encode(
                HMACSHA256.authenticate(Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8), key: key6)
            )
                == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
    }

    @Test func constantTimeCompare() {
        #expect(ConstantTime.equals([1, 2, 3], [1, 2, 3]))
        #expect(!ConstantTime.equals([1, 2, 3], [1, 2, 4]))
        #expect(!ConstantTime.equals([1, 2, 3], [1, 2]))
    }

    @Test func base64url() {
        #expect(Base64URL.encode(Array("f".utf8)) == "Zg")
        #expect(Base64URL.encode(Array("foobar".utf8)) == "Zm9vYmFy")
        #expect(Base64URL.encode([0xfb, 0xff]) == "-_8")
        #expect(Base64URL.decode("-_8") == [0xfb, 0xff])
        #expect(Base64URL.decode("+/8=") == [0xfb, 0xff])
        #expect(Base64URL.decode("a") == nil)
        #expect(Base64URL.decode("a*b") == nil)
        for n in 0..<40 {
            let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
    }

    /// RFC 7515 appendix A.3: the ES256 example JWS verifies with the example key.
    @Test func es256RFC7515AppendixA3() throws {
        let x = try #require(Base64URL.decode("f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"))
        let y = try #require(Base64URL.decode("x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"))
        let d = try #require(Base64URL.decode("jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI"))
        let jws =
            "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ."
            + "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"
        let parts = try #require(JWS.parse(jws))
        let publicKey = try ES256PublicKey(x: x, y: y)
        #expect(publicKey.verify(signature: parts.signature, for: parts.signingInput))
        var tampered = parts.signature
        tampered[10] ^= 1
        #expect(!publicKey.verify(signature: tampered, for: parts.signingInput))
        // Our own signature with the same private key verifies too (ECDSA signatures are randomised).
        let privateKey = try ES256PrivateKey(x: x, y: y, d: d)
        let mine = try JWS.sign(header: parts.header, payload: parts.payload, key: privateKey)
        let mineParts = try #require(JWS.parse(mine))
        #expect(mineParts.signature.count == 64)
        #expect(publicKey.verify(signature: mineParts.signature, for: mineParts.signingInput))
    }

    /// RFC 7638 thumbprint of the RFC 7515 A.3 key: SHA-256 over {"crv","kty","x","y"} in that order,
    /// computed independently with Python's hashlib.
    @Test func thumbprintRFC7638() throws {
        let x = try #require(Base64URL.decode("f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"))
        let y = try #require(Base64URL.decode("x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"))
        #expect(try ES256PublicKey(x: x, y: y).thumbprint == "oKIywvGUpTVTyxMQ3bwIIeQUudfr_CkLMjCE19ECD-U")
    }

    @Test func pemRoundTripAndRejection() throws {
        let key = try ES256PrivateKey.generate()
        let pem = try key.pemRepresentation()
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let loaded = try ES256PrivateKey(pem: pem)
        #expect(loaded.publicKey.thumbprint == key.publicKey.thumbprint)
        let signature = try loaded.sign(Array("m".utf8))
        #expect(key.publicKey.verify(signature: signature, for: Array("m".utf8)))
        #expect(throws: CryptoError.self) {
            try ES256PrivateKey(pem: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
        }
        #expect(throws: CryptoError.self) {
            try ES256PublicKey(x: [UInt8](repeating: 1, count: 32), y: [UInt8](repeating: 2, count: 32))
        }
        #expect(key.publicKey.jwkJSON(kid: "k1").contains("\"crv\":\"P-256\""))
    }
}

@Suite("ES256 keys shared by threads")
struct ES256ConcurrencyTests {
    /// One key signs and verifies on many threads at once, each from a copy of the key's prepared context.
    @Test func oneKeySignsAndVerifiesOnManyThreads() async throws {
        let key = try ES256PrivateKey.generate()
        let verifier = try ES256PublicKey(x: key.publicKey.x, y: key.publicKey.y)
        let failures = try await withThrowingTaskGroup(of: Int.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    var failures = 0
                    for i in 0..<200 {
                        let message = Array("header.payload.\(worker).\(i)".utf8)
                        let signature = try key.sign(message)
                        if !verifier.verify(signature: signature, for: message) { failures += 1 }
                        if key.publicKey.verify(signature: signature, for: message + [0]) { failures += 1 }
                    }
                    return failures
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(failures == 0)
    }
}

@Suite("RS256")
struct RS256Tests {
    @Test func signsVerifiesAndRoundTripsThroughPEM() throws {
        let key = try RSAKey.generate()
        let message = Array("header.payload".utf8)
        let signature = try key.sign(message)
        #expect(signature.count == 256)
        let publicKey = try RSAKey(pem: try key.publicPEM())
        #expect(!publicKey.isPrivate && publicKey.verify(signature: signature, for: message))
        #expect(!publicKey.verify(signature: signature, for: Array("header.payloaD".utf8)))
        var tampered = signature
        tampered[0] ^= 1
        #expect(!publicKey.verify(signature: tampered, for: message))
        let reloaded = try RSAKey(pem: try key.privatePEM())
        let again = try reloaded.sign(message)
        #expect(reloaded.isPrivate && publicKey.verify(signature: again, for: message))
        #expect(try key.privatePEM().hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(throws: CryptoError.self) {
            try RSAKey(pem: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")
        }
        // An EC key is not an RSA key.
        #expect(throws: CryptoError.self) { try RSAKey(pem: try ES256PrivateKey.generate().pemRepresentation()) }
    }
}
