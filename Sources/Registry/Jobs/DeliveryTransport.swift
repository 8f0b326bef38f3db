import Crypto

/// What a linked service's endpoint answered.
public enum DeliveryResponse: Sendable, Equatable {
    case status(Int)
    case failed(String)
}

/// Sends a signed deletion notice; the domain does not know HTTP, so the API layer provides this.
public protocol DeliveryTransport: Sendable {
    func post(endpoint: String, body: [UInt8], headers: [(String, String)]) async -> DeliveryResponse
}

/// The signature a linked service checks on every notice:
/// `Registry-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
public enum WebhookSignature {
    public static func header(secret: String, timestamp: Int64, body: [UInt8]) -> String {
        let mac = HMACSHA256.authenticate(Array("\(timestamp).".utf8) + body, key: Array(secret.utf8))
        return "t=\(timestamp),v1=\(Hex.encode(mac))"
    }
}
