import Crypto
import Foundation

/// What a linked service's endpoint answered.
public enum DeliveryResponse: Sendable, Equatable {
    case status(Int)
    case failed(String)
}

/// Sends a signed deletion notice; the domain does not know HTTP, so the API layer provides this.
public protocol DeliveryTransport: Sendable {
    func post(endpoint: String, body: [UInt8], headers: [(String, String)]) async -> DeliveryResponse
}

/// The signature on every notice, and on every acknowledgement a linked service sends back:
/// `Registry-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>[,v1=…]`, one `v1` per secret in
/// force (two for a day after a rotation, the new one first).
public enum WebhookSignature {
    /// How far a signature's time may be from now.
    public static let tolerance: Int64 = 300

    public static func header(secrets: [String], timestamp: Int64, body: [UInt8]) -> String {
        (["t=\(timestamp)"] + secrets.map { "v1=" + mac(secret: $0, timestamp: String(timestamp), body: body) })
            .joined(separator: ",")
    }

    static func mac(secret: String, timestamp: String, body: [UInt8]) -> String {
        Hex.encode(HMACSHA256.authenticate(Array("\(timestamp).".utf8) + body, key: Array(secret.utf8)))
    }

    /// True when `header` carries a current time and a `v1` that one of `secrets` made for `body`.
    public static func verify(header: String, secrets: [String], body: [UInt8], now: Int64) -> Bool {
        guard header.utf8.count <= 1024 else { return false }
        var timestamp: String?
        var macs: [String] = []
        for part in header.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2 else { continue }
            if pair[0] == "t" { timestamp = pair[1] } else if pair[0] == "v1" { macs.append(pair[1].lowercased()) }
        }
        guard let timestamp, let t = Int64(timestamp), abs(now - t) <= tolerance, !macs.isEmpty else { return false }
        for secret in secrets {
            let expected = Array(mac(secret: secret, timestamp: timestamp, body: body).utf8)
            if macs.contains(where: { ConstantTime.equals(Array($0.utf8), expected) }) { return true }
        }
        return false
    }
}
