import Crypto
import FuzzSupport
import JSON

// Any text as a compact JWS: parsing returns parts or nil; the parts' JSON is parsed as the verifiers do, and a
// signature check with a key that never signed anything never succeeds. Then the input is used as a payload: what is
// signed parses back to the same bytes and verifies.
let key = try! ES256PrivateKey.generate()
let publicKey = key.publicKey

Fuzzer.run { bytes in
    let text = String(decoding: bytes, as: UTF8.self)
    if let parts = JWS.parse(text) {
        _ = try? JSONParser.parse(parts.header)
        _ = try? JSONParser.parse(parts.payload)
        precondition(!publicKey.verify(signature: parts.signature, for: parts.signingInput), "a forged token verified")
    }
    _ = Base64URL.decode(text)
    let header = Array(#"{"alg":"ES256","typ":"JWT"}"#.utf8)
    guard let token = try? JWS.sign(header: header, payload: bytes, key: key) else {
        preconditionFailure("signing failed")
    }
    guard let parts = JWS.parse(token) else { preconditionFailure("our own token did not parse") }
    precondition(parts.header == header && parts.payload == bytes, "a token's parts changed")
    precondition(publicKey.verify(signature: parts.signature, for: parts.signingInput), "our own token did not verify")
}
