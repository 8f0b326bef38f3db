import Crypto
import Foundation

/// What a linked service's endpoint answered.
public enum DeliveryResponse: Sendable, Equatable {
    case status(Int)
    case failed(String)
}

/// Sends a signed deletion notice; the domain does not know HTTP, so the API layer provides this.
public protocol DeliveryTransport: Sendable {
    /// Posts a notice of `project`'s to `endpoint` (the project is who the look-up of its host is counted against).
    func post(endpoint: String, body: [UInt8], headers: [(String, String)], project: String) async -> DeliveryResponse
}

/// The `Registry-Signature` header: `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, message)>[,v1=…]`, one `v1` per
/// secret in force (two for a day after a rotation, the new one first).
///
/// What the message is depends on what the signature vouches for (``Purpose``), so a signature made for one thing
/// never counts for another: a notice's signature covers `"<t>.<body>"`; an acknowledgement's and a rotation's start
/// with a prefix no notice can (a notice's message starts with a digit) and name what they confirm.
public enum WebhookSignature {
    /// How far a signature's time may be from now.
    public static let tolerance: Int64 = 300

    /// What a signature vouches for.
    public enum Purpose: Sendable, Equatable {
        /// A deletion notice the registry sends: `"<t>.<body>"`.
        case notice
        /// A linked service confirms one delivery:
        /// `"registry-ack.v1\n<t>\n<project>\n<fid>\n<service>\n<deliveryId>\n<body>"`.
        case acknowledgement(project: String, fid: String, service: String, deliveryID: String)
        /// A linked service asks for a new secret: `"registry-rotate.v1\n<t>\n<project>\n<service>\n<body>"`.
        case rotation(project: String, service: String)
    }

    public static func header(secrets: [String], timestamp: Int64, body: [UInt8], for purpose: Purpose = .notice)
        -> String
    {
        (["t=\(timestamp)"]
            + secrets.map { "v1=" + mac(secret: $0, timestamp: String(timestamp), body: body, purpose: purpose) })
            .joined(separator: ",")
    }

    /// The bytes a signature covers.
    public static func message(timestamp: String, body: [UInt8], purpose: Purpose) -> [UInt8] {
        switch purpose {
        case .notice:
            return Array("\(timestamp).".utf8) + body
        case let .acknowledgement(project, fid, service, deliveryID):
            return Array("registry-ack.v1\n\(timestamp)\n\(project)\n\(fid)\n\(service)\n\(deliveryID)\n".utf8) + body
        case let .rotation(project, service):
            return Array("registry-rotate.v1\n\(timestamp)\n\(project)\n\(service)\n".utf8) + body
        }
    }

    static func mac(secret: String, timestamp: String, body: [UInt8], purpose: Purpose) -> String {
        Hex.encode(
            HMACSHA256.authenticate(
                message(timestamp: timestamp, body: body, purpose: purpose), key: Array(secret.utf8)))
    }

    /// The parts of a header: its time (when it is a decimal number of seconds) and its `v1` values.
    public struct Parsed: Sendable, Equatable {
        public var timestamp: Int64?
        /// The time as written, which is what was signed.
        public var timestampText: String?
        public var macs: [String] = []
    }

    /// Reads a header; nil when it is longer than 1 KiB. Never traps: a time outside Int64 reads as no time.
    public static func parse(_ header: String) -> Parsed? {
        guard header.utf8.count <= 1024 else { return nil }
        var parsed = Parsed()
        for part in header.split(separator: ",", omittingEmptySubsequences: true) {
            let pair = part.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2 else { continue }
            if pair[0] == "t" {
                // Digits only (an optional minus): `Int64("+5")` would accept a form the signer never writes.
                let digits = pair[1].utf8.drop { $0 == UInt8(ascii: "-") }
                guard (1...19).contains(digits.count), pair[1].utf8.count - digits.count <= 1,
                    digits.allSatisfy({ (48...57).contains($0) })
                else { continue }
                parsed.timestamp = Int64(pair[1])
                parsed.timestampText = pair[1]
            } else if pair[0] == "v1", pair[1].utf8.count == 64 {
                parsed.macs.append(pair[1].lowercased())
            }
        }
        return parsed
    }

    /// True when `t` is within ``tolerance`` of `now`, computed without arithmetic on the client's number (any
    /// Int64 is a valid input, the edges included).
    public static func isCurrent(_ t: Int64, now: Int64) -> Bool { ClientNumbers.isWithin(t, tolerance, of: now) }

    /// The index in `secrets` of the one that signed `body` for `purpose` with a current time; nil when none did.
    public static func signer(
        header: String, secrets: [String], body: [UInt8], now: Int64, for purpose: Purpose = .notice
    ) -> Int? {
        guard let parsed = parse(header), let t = parsed.timestamp, let text = parsed.timestampText,
            isCurrent(t, now: now), !parsed.macs.isEmpty
        else { return nil }
        for (index, secret) in secrets.enumerated() {
            let expected = Array(mac(secret: secret, timestamp: text, body: body, purpose: purpose).utf8)
            if parsed.macs.contains(where: { ConstantTime.equals(Array($0.utf8), expected) }) { return index }
        }
        return nil
    }

    /// True when `header` carries a current time and a `v1` that one of `secrets` made for `body` and `purpose`.
    public static func verify(
        header: String, secrets: [String], body: [UInt8], now: Int64, for purpose: Purpose = .notice
    ) -> Bool {
        signer(header: header, secrets: secrets, body: body, now: now, for: purpose) != nil
    }
}
