import Foundation
import JSON

/// OneSignal's CSV export (`POST /players/csv_export`, documentation.onesignal.com/reference/csv-export): the player
/// columns (`id`, now the subscription ID; `identifier`, the push token; `device_type`; `invalid_identifier`; `tags`;
/// `last_active`; `created_at`; `game_version`) and the extra fields `external_user_id`, `notification_types`,
/// `web_auth`, `web_p256`. `device_type` 0 is iOS (an APNs token), 1 Android (an FCM token), 5 Chrome, 8 Firefox,
/// 12 Edge and 17 Safari web push (the endpoint, with `web_auth` and `web_p256`); the others (FireOS, Huawei, Safari's
/// legacy push, email, SMS) are skipped. A header with `type` and `token` columns (`iOSPush`, `AndroidPush`,
/// `ChromePush`, … as the user model names them) is read the same way, with `enabled` and `external_id`.
/// A subscription is consented when `notification_types` is positive (or, without it, `enabled` is true) and
/// `invalid_identifier` is not `t`. Tags whose value is not empty, `0` or `false` become topics named by their key.
/// The export has no APNs environment: iOS tokens are imported without one.
struct OneSignalReader: ImportReader {
    var csv: CSVReader
    var columns: [String: Int] = [:]

    init(csv: CSVReader) { self.csv = csv }

    mutating func next() throws -> ImportRow? {
        guard let (line, fields) = try csv.next() else { return nil }
        if columns.isEmpty {
            for (i, name) in fields.enumerated() { columns[name.trimmingCharacters(in: .whitespaces).lowercased()] = i }
            guard columns["identifier"] != nil || columns["token"] != nil else {
                throw ImportError("line 1: not a OneSignal export (no identifier or token column)")
            }
            return .skipped
        }
        if fields.count == 1 && fields[0].isEmpty { return .skipped }
        func field(_ name: String) -> String? {
            guard let i = columns[name], i < fields.count else { return nil }
            let value = fields[i].trimmingCharacters(in: .whitespaces)
            return value.isEmpty ? nil : value
        }
        let token = field("identifier") ?? field("token")
        let key = "onesignal:" + (field("subscription_id") ?? field("id") ?? token ?? String(line))
        let kind: String
        if let type = field("type") {
            kind = type.lowercased()
        } else {
            switch field("device_type") {
            case "0": kind = "iospush"
            case "1": kind = "androidpush"
            case "5", "8", "12", "17": kind = "webpush"
            default: kind = "other:" + (field("device_type") ?? "")
            }
        }
        let made: Result<ImportRecord, ImportRejection>
        switch kind {
        case "iospush":
            made = SourceFormats.record(
                line: line, sourceKey: key, platform: .ios, apnsToken: token ?? "", environment: false)
        case "androidpush":
            made = SourceFormats.record(line: line, sourceKey: key, platform: .android, fcmToken: token ?? "")
        case "webpush", "chromepush", "firefoxpush", "safaripush", "edgepush":
            made = SourceFormats.record(
                line: line, sourceKey: key, platform: .web,
                web: WebPush(
                    endpoint: token ?? "", auth: field("web_auth") ?? "", p256dh: field("web_p256") ?? "",
                    applicationPubKey: nil, origin: nil))
        default: return .skipped
        }
        switch made {
        case var .success(r):
            let invalid = SourceFormats.bool(field("invalid_identifier").map { .string($0) }) ?? false
            if let types = field("notification_types").flatMap(Int.init) {
                r.messagingConsent = types > 0 && !invalid
            } else if let enabled = SourceFormats.bool(field("enabled").map { .string($0) }) {
                r.messagingConsent = enabled && !invalid
            } else if invalid {
                r.messagingConsent = false
            }
            r.userID = SourceFormats.userID(field("external_user_id") ?? field("external_id"))
            r.createdAt = SourceTime.parse(field("created_at"))
            r.lastSeenAt = SourceTime.parse(field("last_active")) ?? r.createdAt
            r.refreshedAt = r.lastSeenAt
            r.consentTime = r.lastSeenAt
            r.appVersion = field("game_version") ?? field("app_version")
            if let tags = field("tags"), let object = try? JSONParser.parse(Array(tags.utf8)), let pairs = object.objectValue {
                let names = pairs.compactMap { name, value -> String? in
                    let text = SourceFormats.text(value) ?? (SourceFormats.bool(value).map { $0 ? "true" : "" } ?? "")
                    return text.isEmpty || text == "0" || text.lowercased() == "false" ? nil : name
                }
                r.topics = SourceFormats.topics(names, at: r.createdAt)
            }
            return .record(r)
        case let .failure(rejection): return .rejected(rejection)
        }
    }
}
