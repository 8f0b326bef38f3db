import Foundation
import JSON

/// The sources `token-registry import` reads (README "Moving to TokenRegistry, and away from it").
public enum ImportFormat: String, Sendable, CaseIterable {
    /// OneSignal's CSV exports: the player model's (`id`, `identifier`, `device_type`, …) and the user model's
    /// subscriptions (`subscription_id`, `type`, `token`, …).
    case oneSignalCSV = "onesignal-csv"
    /// fcm-django's `dumpdata fcm_django.fcmdevice`.
    case fcmDjango = "fcm-django"
    /// django-push-notifications' `dumpdata push_notifications` (`gcmdevice`, `apnsdevice`, `webpushdevice`).
    case pushNotifications = "push-notifications"
    /// Amazon SNS `ListEndpointsByPlatformApplication` pages (as the AWS CLI prints them).
    case sns
    /// Amazon Pinpoint's endpoint export (JSON lines).
    case pinpoint
    /// The registry's own export (``RegistryExportFormat``).
    case registry

    /// The ledger's `source` of what an import records: `import:<format>`.
    public var consentSource: String { "import:" + rawValue }
}

/// One installation as an import carries it, whatever the source said.
public struct ImportRecord: Sendable, Equatable {
    /// Where it was in the source (for rejections and progress).
    public var line: Int
    /// What identifies the device in the source (a player ID, an endpoint ARN, a token): an installation made for a
    /// token without an FID is derived from it, so a re-run lands on the same one.
    public var sourceKey: String
    /// The FID, when the source has one (an FCM token's, or the registry's own export).
    public var fid: String?
    public var appID: String?
    public var platform: Platform
    /// The FCM registration token; nil for a device known by its APNs token or web push subscription only.
    public var token: String?
    public var apnsToken: String?
    public var apnsEnvironment: APNsEnvironment?
    public var bundleID: String?
    public var web: WebPush?
    /// Messaging consent as the source had it (enabled, opted out, unsubscribed); nil: the app's default.
    public var messagingConsent: Bool?
    public var consentTime: Date?
    /// The registry's own export: every consent purpose's state and the whole ledger, as they were.
    public var consents: [ConsentState] = []
    public var ledger: [ConsentEvent] = []
    public var topics: [TopicSubscription] = []
    public var userID: String?
    public var boundAt: Date?
    public var createdAt: Date?
    public var lastSeenAt: Date?
    public var refreshedAt: Date?
    public var sdkVersion: String?
    public var appVersion: String?
    public var senderTokens: [SenderTokenRecord] = []
    /// The registry's own export: the registration as it was, and the source an imported installation came from.
    public var registration: Registration?
    public var importedFrom: String?

    public init(line: Int, sourceKey: String, platform: Platform) {
        self.line = line
        self.sourceKey = sourceKey
        self.platform = platform
    }
}

/// A source row the import could not use, and why (it never stops the import).
public struct ImportRejection: Error, Sendable, Equatable {
    public let line: Int
    public let reason: String

    public init(line: Int, reason: String) {
        self.line = line
        self.reason = reason
    }
}

/// What one source row became.
public enum ImportRow: Sendable, Equatable {
    case record(ImportRecord)
    case rejected(ImportRejection)
    /// Not a device (a header, the export's first line, a model the format does not import).
    case skipped
}

/// A source's rows, one at a time, in order.
public protocol ImportReader {
    /// The next row; nil at the end.
    mutating func next() throws -> ImportRow?
}

/// Times as the sources write them: RFC 3339 (with or without fraction or zone), `YYYY-MM-DD HH:MM:SS[.f] [UTC|+zz]`,
/// or seconds (or milliseconds, when too large to be seconds) since 1970.
enum SourceTime {
    static func parse(_ text: String?) -> Date? {
        guard var text = text?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if let number = Double(text) {
            guard number.isFinite, number > 0 else { return nil }
            let seconds = number > 100_000_000_000 ? number / 1000 : number
            return seconds < 32_503_680_000 ? Date(timeIntervalSince1970: seconds) : nil
        }
        if text.hasSuffix(" UTC") { text = String(text.dropLast(4)) + "Z" }
        text = text.replacingOccurrences(of: " ", with: "T")
        if text.count == 19 { text += "Z" }
        if let date = Timestamp.parse(text) { return date }
        // `+00` zones (PostgreSQL's text): `+00:00`.
        if let sign = text.lastIndex(where: { $0 == "+" || $0 == "-" }), text.distance(from: sign, to: text.endIndex) == 3,
            text[..<sign].contains("T")
        {
            return Timestamp.parse(text + ":00")
        }
        return nil
    }
}
