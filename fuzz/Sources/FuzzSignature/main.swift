import FuzzSupport
import Registry

// `Registry-Signature` as the ack and rotation routes read it, from anyone: any header text at any receiver clock
// never traps and never verifies without the secret. Structured inputs (first byte odd) pick the signer's and the
// receiver's times among all Int64 values: a signature verifies exactly when the times are within the tolerance
// (a model in 128-bit arithmetic), and only for the purpose it was made for.
let secret = "whsec_fuzz"
let purposes: [WebhookSignature.Purpose] = [
    .notice, .acknowledgement(project: "p", fid: "f", service: "s", deliveryID: "d"),
    .rotation(project: "p", service: "s"),
]

func int64(_ bytes: ArraySlice<UInt8>) -> Int64 {
    Int64(bitPattern: bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
}

Fuzzer.run { bytes in
    guard let first = bytes.first else { return }
    if first & 1 == 0 || bytes.count < 17 {
        let header = String(decoding: bytes.dropFirst(), as: UTF8.self)
        let now = bytes.count >= 9 ? int64(bytes[1...8]) : 0
        _ = WebhookSignature.parse(header)
        for purpose in purposes {
            precondition(
                !WebhookSignature.verify(header: header, secrets: [secret], body: [], now: now, for: purpose),
                "a header made without the secret verified")
        }
        return
    }
    let t = int64(bytes[1...8])
    let now = int64(bytes[9...16])
    let body = Array(bytes.dropFirst(17))
    let made = Int(first >> 1) % purposes.count
    let header = WebhookSignature.header(secrets: [secret], timestamp: t, body: body, for: purposes[made])
    let current = abs(Int128(t) - Int128(now)) <= Int128(WebhookSignature.tolerance)
    for (index, purpose) in purposes.enumerated() {
        let verified = WebhookSignature.verify(header: header, secrets: [secret], body: body, now: now, for: purpose)
        precondition(verified == (current && index == made), "t \(t), now \(now), made for \(made), checked \(index)")
    }
}
