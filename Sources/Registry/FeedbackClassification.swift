import Foundation
import JSON

/// Where a send result came from: the sender that answered it.
public enum FeedbackChannel: String, Sendable, CaseIterable {
    /// FCM (HTTP v1, or the legacy API's codes).
    case fcm
    /// APNs, directly.
    case apns
    /// A web push service (RFC 8030).
    case webpush
}

/// What a send result says about the token: the one classification every route and store applies
/// (docs/feedback.md has the table with the source of each code).
public enum FeedbackClass: String, Sendable, CaseIterable {
    /// The token is dead: retire it.
    case dead
    /// The token may be dead: quarantine it (still targeted, marked); only a `dead` result or the operator retires it.
    case suspect
    /// The message was wrong: nothing about the token.
    case badMessage = "bad_message"
    /// The sender's configuration is wrong (credentials, APNs topic or environment, sender ID): never touches tokens.
    case senderConfig = "sender_config"
    /// Try again later: nothing about the token.
    case transient
    /// Delivered: counts in the window only.
    case delivered
    /// Not a code this table knows: ignored, counted.
    case unknown

    /// Whether results of this class count against tokens (and toward the breaker).
    public var touchesTokens: Bool { self == .dead || self == .suspect }
}

/// One send result, classified: what the sender answered, what it means, and (APNs 410) since when the token is
/// invalid.
public struct SendOutcome: Sendable, Equatable {
    public let channel: FeedbackChannel
    public let feedbackClass: FeedbackClass
    /// The sender's own code (`UNREGISTERED`, `Unregistered`, `410`, `NotRegistered`), at most 64 printable bytes.
    public let code: String
    public let invalidSince: Date?

    public init(channel: FeedbackChannel, feedbackClass: FeedbackClass, code: String, invalidSince: Date? = nil) {
        self.channel = channel
        self.feedbackClass = feedbackClass
        self.code = SendOutcome.printable(code, maxBytes: 64)
        self.invalidSince = invalidSince
    }

    /// `text` as a stored code: control characters (NUL among them, which no text column takes) as `?`, cut to
    /// `maxBytes` bytes at a character's end. A sender's answer is relayed as received, so whatever its strings hold.
    static func printable(_ text: String, maxBytes: Int) -> String {
        var out = String.UnicodeScalarView()
        var bytes = 0
        for scalar in text.unicodeScalars {
            let kept: Unicode.Scalar = scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) ? "?" : scalar
            bytes += kept.utf8.count
            guard bytes <= maxBytes else { break }
            out.append(kept)
        }
        return String(out)
    }
}

/// The classification table (docs/feedback.md), one function per sender shape.
public enum FeedbackClassifier {
    /// An FCM HTTP v1 error response body, as received (`{"error": {"code", "message", "status", "details"}}`),
    /// classified by its `FcmError` `errorCode` (https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode),
    /// or by `status` when it has none.
    public static func fcm(_ body: JSONValue) -> SendOutcome {
        let error = body["error"] ?? body
        let details = error["details"]?.arrayValue ?? []
        let fcmCode = details.first { $0["@type"]?.stringValue?.hasSuffix("google.firebase.fcm.v1.FcmError") == true }?[
            "errorCode"]?.stringValue
        let status = error["status"]?.stringValue
        let message = error["message"]?.stringValue ?? ""
        let violations = details.flatMap { $0["fieldViolations"]?.arrayValue ?? [] }.compactMap { $0["field"]?.stringValue }
        let namesToken = violations.contains("message.token") || message.lowercased().contains("registration token")
        func outcome(_ c: FeedbackClass, _ code: String) -> SendOutcome { SendOutcome(channel: .fcm, feedbackClass: c, code: code) }
        switch fcmCode ?? status ?? "" {
        case "UNREGISTERED": return outcome(.dead, "UNREGISTERED")
        case "INVALID_ARGUMENT":
            // The same code for a bad token and a bad message; only one that names the token is about it.
            return outcome(namesToken ? .dead : .badMessage, "INVALID_ARGUMENT")
        case "SENDER_ID_MISMATCH":
            // The token belongs to another sender: the sender's setup, unless the answer names the token itself.
            return outcome(violations.contains("message.token") ? .suspect : .senderConfig, "SENDER_ID_MISMATCH")
        case "THIRD_PARTY_AUTH_ERROR", "PERMISSION_DENIED", "UNAUTHENTICATED":
            return outcome(.senderConfig, fcmCode ?? status ?? "")
        case "QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED":
            return outcome(.transient, fcmCode ?? status ?? "")
        case "NOT_FOUND":
            // 404 without an FcmError code: most likely an unregistered token, not certainly.
            return outcome(.suspect, "NOT_FOUND")
        case "UNSPECIFIED_ERROR": return outcome(.unknown, "UNSPECIFIED_ERROR")
        default: return outcome(.unknown, String((fcmCode ?? status ?? "none").prefix(64)))
        }
    }

    /// An APNs response (https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns):
    /// its status, its `reason`, and for 410 the `timestamp` (ms since 1970) since which the token is invalid.
    public static func apns(status: Int?, reason: String?, timestamp: Int64?) -> SendOutcome {
        let code = reason ?? status.map(String.init) ?? "none"
        func outcome(_ c: FeedbackClass, since: Date? = nil) -> SendOutcome {
            SendOutcome(channel: .apns, feedbackClass: c, code: code, invalidSince: since)
        }
        switch reason {
        case "Unregistered", "ExpiredToken":
            return outcome(.dead, since: timestamp.map { Date(timeIntervalSince1970: Double($0) / 1000) })
        // A token of the other environment answers BadDeviceToken too: may be dead, never retired on one answer.
        case "BadDeviceToken": return outcome(.suspect)
        case "DeviceTokenNotForTopic", "TopicDisallowed", "BadTopic", "MissingTopic", "BadCertificate",
            "BadCertificateEnvironment", "ExpiredProviderToken", "InvalidProviderToken", "MissingProviderToken",
            "Forbidden", "UnrelatedKeyIdInToken", "BadEnvironmentKeyInToken":
            return outcome(.senderConfig)
        case "BadCollapseId", "BadExpirationDate", "BadMessageId", "BadPriority", "DuplicateHeaders", "IdleTimeout",
            "InvalidPushType", "MissingDeviceToken", "PayloadEmpty", "PayloadTooLarge", "BadPath", "MethodNotAllowed":
            return outcome(reason == "IdleTimeout" ? .transient : .badMessage)
        case "TooManyProviderTokenUpdates", "TooManyRequests", "InternalServerError", "ServiceUnavailable",
            "Shutdown":
            return outcome(.transient)
        default:
            switch status {
            case 200?: return outcome(.delivered)
            case 410?: return outcome(.dead, since: timestamp.map { Date(timeIntervalSince1970: Double($0) / 1000) })
            case 429?, 500?, 503?: return outcome(.transient)
            case 403?: return outcome(.senderConfig)
            default: return outcome(.unknown)
            }
        }
    }

    /// A web push service's status (RFC 8030 §5, §8; each service's docs: 404 and 410 mean the subscription is gone).
    public static func webpush(status: Int) -> SendOutcome {
        let c: FeedbackClass
        switch status {
        case 200...299: c = .delivered
        case 404, 410: c = .dead
        case 401, 403: c = .senderConfig  // VAPID
        case 400, 413: c = .badMessage
        case 429, 500...599: c = .transient
        default: c = .unknown
        }
        return SendOutcome(channel: .webpush, feedbackClass: c, code: String(status))
    }

    /// A legacy FCM/GCM error string (https://firebase.google.com/docs/cloud-messaging/http-server-ref, table 9).
    public static func legacy(_ code: String) -> SendOutcome {
        let c: FeedbackClass
        switch code {
        case "NotRegistered", "InvalidRegistration": c = .dead
        case "MismatchSenderId", "InvalidPackageName", "InvalidApnsCredential", "Authentication": c = .senderConfig
        case "MissingRegistration", "MessageTooBig", "InvalidDataKey", "InvalidTtl", "InvalidParameters": c = .badMessage
        case "Unavailable", "InternalServerError", "DeviceMessageRateExceeded", "TopicsMessageRateExceeded": c = .transient
        default: c = .unknown
        }
        return SendOutcome(channel: .fcm, feedbackClass: c, code: code)
    }

    /// gorush's feedback hook body (`logx.LogPushEntry`): `type` `failed-push` or `succeeded-push`, `platform` `ios`
    /// or `android`, and `error` as gorush wrote it: the APNs reason for iOS (`errors.New(res.Reason)`), the
    /// firebase-admin-go error's message for Android (or a legacy code from older gorush).
    public static func gorush(type: String, platform: String, error: String) -> SendOutcome? {
        let channel: FeedbackChannel
        switch platform {
        case "ios": channel = .apns
        case "android": channel = .fcm
        default: return nil
        }
        if type == "succeeded-push" { return SendOutcome(channel: channel, feedbackClass: .delivered, code: "delivered") }
        guard type == "failed-push" else { return nil }
        if channel == .apns { return apns(status: nil, reason: error, timestamp: nil) }
        switch error {
        // firebase-admin-go carries the FCM answer's message: the two that name the token. FCM's send answers 404 for a
        // token only as UNREGISTERED ("Requested entity was not found."), so through gorush that message is dead.
        case "Requested entity was not found.": return SendOutcome(channel: .fcm, feedbackClass: .dead, code: "UNREGISTERED")
        case "The registration token is not a valid FCM registration token":
            return SendOutcome(channel: .fcm, feedbackClass: .dead, code: "INVALID_ARGUMENT")
        case "SenderId mismatch": return SendOutcome(channel: .fcm, feedbackClass: .senderConfig, code: "SENDER_ID_MISMATCH")
        // An INVALID_ARGUMENT whose details gorush dropped: the token or the message, it cannot say.
        case "Request contains an invalid argument.":
            return SendOutcome(channel: .fcm, feedbackClass: .badMessage, code: "INVALID_ARGUMENT")
        // Older gorush, on go-fcm 0.1 (the legacy API's errors under their own names).
        case "unregistered device", "invalid registration token":
            return SendOutcome(channel: .fcm, feedbackClass: .dead, code: error)
        case "mismatched sender id": return SendOutcome(channel: .fcm, feedbackClass: .senderConfig, code: error)
        default:
            let old = legacy(error)
            return old.feedbackClass == .unknown
                ? SendOutcome(channel: .fcm, feedbackClass: .unknown, code: "gorush") : old
        }
    }
}
