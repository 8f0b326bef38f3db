import Crypto
import Dispatch
import Foundation
import FuzzSupport
import JSON
import Registry

// `POST /token`'s RS256 assertion, past its signature: the input is the claims the holder of a service account's key
// signs, so every claim check runs. Raw inputs (first byte even) are the payload as is; structured ones pick `iat`
// and `exp` among all Int64 values. Never a trap; an access token only for claims that follow every rule (checked
// against a model in 128-bit arithmetic).
final class OneAccount: ServiceAccountStore {
    let account: ServiceAccount
    init(_ account: ServiceAccount) { self.account = account }
    func insert(_ account: ServiceAccount) async throws {}
    func account(keyID: String) async throws -> ServiceAccount? { keyID == account.keyID ? account : nil }
    func account(clientEmail: String) async throws -> ServiceAccount? {
        clientEmail == account.clientEmail ? account : nil
    }
    func accounts(projectID: String) async throws -> [ServiceAccount] { [account] }
    func revoke(keyID: String, at: Date) async throws -> Bool { false }
}

let key = try! RSAKey.generate()
let now = Date(timeIntervalSince1970: 1_800_000_000)
let account = ServiceAccount(
    projectID: "fuzz-proj", keyID: "k1", clientEmail: "sa@fuzz-proj.iam.gserviceaccount.com",
    publicKeyPEM: try! key.publicPEM(), tokenURI: "https://r.example/token", createdAt: now)
let service = ServiceAccountService(
    store: OneAccount(account), clock: ManualClock(now), tokenKey: Array("fuzz-token-key".utf8))
let header = Array(#"{"alg":"RS256","kid":"k1"}"#.utf8)

func exchange(_ payload: [UInt8]) -> Bool {
    let input = Base64URL.encode(header) + "." + Base64URL.encode(payload)
    let assertion = input + "." + Base64URL.encode(try! key.sign(Array(input.utf8)))
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var accepted = false
    Task.detached {
        accepted = (try? await service.exchange(assertion: assertion)) != nil
        done.signal()
    }
    done.wait()
    return accepted
}

func int64(_ bytes: ArraySlice<UInt8>) -> Int64 {
    Int64(bitPattern: bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
}

Fuzzer.run { bytes in
    guard let first = bytes.first else { return }
    if first & 1 == 0 || bytes.count < 17 {
        _ = exchange(Array(bytes.dropFirst()))
        return
    }
    let iat = int64(bytes[1...8])
    let exp = int64(bytes[9...16])
    let claims = JSONValue.object([
        ("iss", .string(account.clientEmail)), ("aud", "https://r.example/token"), ("iat", .int(iat)), ("exp", .int(exp)),
    ])
    let t = Int128(Int64(now.timeIntervalSince1970))
    let valid = Int128(exp) > t && Int128(iat) <= t + 60 && Int128(exp) > Int128(iat) && Int128(exp) - Int128(iat) <= 3600
        && Int128(exp) <= t + 3660
    precondition(exchange(claims.encoded()) == valid, "iat \(iat), exp \(exp)")
}
