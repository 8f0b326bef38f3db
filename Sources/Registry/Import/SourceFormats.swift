import Foundation
import JSON

/// Each source's rows as ``ImportRecord``s. What each format reads, column by column, is in README "Moving to
/// TokenRegistry, and away from it", with the vendors' documentation it follows.
public enum SourceFormats {
    /// The reader of `format` over `bytes`.
    public static func reader(_ format: ImportFormat, _ bytes: SourceBytes) -> any ImportReader {
        switch format {
        case .oneSignalCSV: return OneSignalReader(csv: CSVReader(bytes))
        case .fcmDjango, .pushNotifications, .sns, .pinpoint, .registry:
            return JSONSourceReader(format: format, values: JSONValues(bytes))
        }
    }

    // MARK: - Shared rules

    static func bool(_ value: JSONValue?) -> Bool? {
        switch value {
        case let .bool(b)?: return b
        case let .string(s)?:
            switch s.lowercased() {
            case "true", "t", "1", "yes": return true
            case "false", "f", "0", "no": return false
            default: return nil
            }
        case let .number(n)?: return n != "0"
        default: return nil
        }
    }

    static func text(_ value: JSONValue?) -> String? {
        switch value {
        case let .string(s)?: return s.isEmpty ? nil : s
        case let .number(n)?: return n
        default: return nil
        }
    }

    /// A user ID the registry can hold, or nil (the row is imported without it).
    static func userID(_ text: String?) -> String? {
        guard let text else { return nil }
        return try? UserService.validate(userID: text)
    }

    /// The topics among `names` the registry can hold (a name it cannot is left out).
    static func topics(_ names: [String], at time: Date?) -> [TopicSubscription] {
        var seen = Set<String>()
        return names.compactMap { raw in
            let name = Topic.normalize(raw.trimmingCharacters(in: .whitespaces))
            guard Topic.isValid(name), seen.insert(name).inserted else { return nil }
            return TopicSubscription(topic: name, createdAt: time ?? Date(timeIntervalSince1970: 0))
        }.prefix(Topic.maxPerInstallation).map { $0 }
    }

    /// A push token's record: an FCM token (its FID, if it carries one), an APNs device token, or a web push
    /// subscription; a row that is none of them is rejected with `reason`.
    /// A device of one of AWS's push channels (an SNS endpoint's platform, a Pinpoint endpoint's `ChannelType`): FCM
    /// (`GCM`), APNs and its sandbox; nil for any other channel.
    static func awsRecord(channel: String, line: Int, sourceKey: String, address: String) -> Result<
        ImportRecord, ImportRejection
    >? {
        switch channel {
        case "GCM": return record(line: line, sourceKey: sourceKey, platform: .android, fcmToken: address)
        case "APNS": return record(line: line, sourceKey: sourceKey, platform: .ios, apnsToken: address)
        case "APNS_SANDBOX":
            return record(line: line, sourceKey: sourceKey, platform: .ios, apnsToken: address, sandbox: true)
        default: return nil
        }
    }

    static func record(
        line: Int, sourceKey: String, platform: Platform, fcmToken: String? = nil, apnsToken: String? = nil,
        sandbox: Bool = false, environment known: Bool = true, web: WebPush? = nil
    ) -> Result<ImportRecord, ImportRejection> {
        var r = ImportRecord(line: line, sourceKey: sourceKey, platform: platform)
        if let token = fcmToken {
            guard RegistrationToken.isValid(token) else {
                return .failure(ImportRejection(line: line, reason: "token: not a registration token"))
            }
            r.token = token
            r.fid = RegistrationToken.fid(of: token)
        } else if let apns = apnsToken {
            guard let device = try? APNsDevice(token: apns, environment: nil, tokenField: "", environmentField: "") else {
                return .failure(ImportRejection(line: line, reason: "token: not an APNs device token (hexadecimal)"))
            }
            r.apnsToken = device.token
            r.apnsEnvironment = known ? (sandbox ? .sandbox : .production) : nil
        } else if let web {
            guard let url = URL(string: web.endpoint), url.scheme == "https", url.host != nil,
                web.endpoint.utf8.count <= 2048, !web.auth.isEmpty, !web.p256dh.isEmpty
            else {
                return .failure(ImportRejection(line: line, reason: "a web push subscription needs an https endpoint, auth and p256dh"))
            }
            r.web = web
        } else {
            return .failure(ImportRejection(line: line, reason: "no push token"))
        }
        return .success(r)
    }
}

/// The JSON sources: Django's `dumpdata`, SNS pages, Pinpoint's export, the registry's own.
struct JSONSourceReader: ImportReader {
    let format: ImportFormat
    var values: JSONValues
    /// The endpoints of an SNS page still to be read (its line, them, the next one's index): each becomes a row only
    /// when it is handed out, so a page of millions of endpoints costs its parsed JSON and one row at a time.
    var page: (line: Int, endpoints: [JSONValue], next: Int)?

    mutating func next() throws -> ImportRow? {
        if let (line, endpoints, index) = page {
            if index < endpoints.count {
                page = (line, endpoints, index + 1)
                return SNSRows.row(endpoints[index], line: line)
            }
            page = nil
        }
        guard let (line, parsed) = values.next() else { return nil }
        let value: JSONValue
        switch parsed {
        case let .success(v): value = v
        case let .failure(error): return .rejected(ImportRejection(line: line, reason: error.description))
        }
        switch format {
        case .fcmDjango, .pushNotifications: return DjangoRows.row(value, line: line, format: format)
        case .sns:
            guard let endpoints = value["Endpoints"]?.arrayValue else {
                return .rejected(ImportRejection(line: line, reason: "not a ListEndpointsByPlatformApplication page"))
            }
            guard let first = endpoints.first else { return .skipped }
            page = (line, endpoints, 1)
            return SNSRows.row(first, line: line)
        case .pinpoint: return PinpointRows.row(value, line: line)
        case .registry: return RegistryExportFormat.row(value, line: line)
        case .oneSignalCSV: return .skipped
        }
    }
}

/// fcm-django's `fcm_django.fcmdevice` and django-push-notifications' `gcmdevice`, `apnsdevice`, `webpushdevice`, as
/// `dumpdata` writes them (`{"model", "pk", "fields"}`).
enum DjangoRows {
    static func row(_ value: JSONValue, line: Int, format: ImportFormat) -> ImportRow {
        guard let model = value["model"]?.stringValue?.lowercased(), let fields = value["fields"] else {
            return .rejected(ImportRejection(line: line, reason: "not a dumpdata object (model, fields)"))
        }
        let pk = SourceFormats.text(value["pk"]) ?? String(line)
        let token = SourceFormats.text(fields["registration_id"])
        let made: Result<ImportRecord, ImportRejection>
        switch (format, model) {
        case (.fcmDjango, "fcm_django.fcmdevice"):
            let platform: Platform
            switch fields["type"]?.stringValue?.lowercased() {
            case "ios": platform = .ios
            case "web": platform = .web
            default: platform = .android
            }
            made = SourceFormats.record(line: line, sourceKey: "\(model):\(pk)", platform: platform, fcmToken: token ?? "")
        case (.pushNotifications, "push_notifications.gcmdevice"):
            made = SourceFormats.record(line: line, sourceKey: "\(model):\(pk)", platform: .android, fcmToken: token ?? "")
        case (.pushNotifications, "push_notifications.apnsdevice"):
            // The environment is the Django settings' (APNS_USE_SANDBOX), not the row's: imported without one.
            made = SourceFormats.record(
                line: line, sourceKey: "\(model):\(pk)", platform: .ios, apnsToken: token ?? "", environment: false)
        case (.pushNotifications, "push_notifications.webpushdevice"):
            made = SourceFormats.record(
                line: line, sourceKey: "\(model):\(pk)", platform: .web,
                web: WebPush(
                    endpoint: token ?? "", auth: fields["auth"]?.stringValue ?? "",
                    p256dh: fields["p256dh"]?.stringValue ?? "", applicationPubKey: nil, origin: nil))
        default: return .skipped
        }
        guard case var .success(r) = made else {
            if case let .failure(rejection) = made { return .rejected(rejection) }
            return .skipped
        }
        r.messagingConsent = SourceFormats.bool(fields["active"])
        r.userID = SourceFormats.userID(SourceFormats.text(fields["user"]))
        r.createdAt = SourceTime.parse(fields["date_created"]?.stringValue)
        r.lastSeenAt = r.createdAt
        r.refreshedAt = r.createdAt
        return .record(r)
    }
}

/// `aws sns list-endpoints-by-platform-application` output: pages of `{"Endpoints": [{"EndpointArn", "Attributes":
/// {"Enabled", "Token", "CustomUserData"}}]}`, one after another. The platform is the ARN's: `…:endpoint/GCM/…`
/// (FCM), `APNS` and `APNS_SANDBOX`.
enum SNSRows {
    /// One endpoint of a page.
    static func row(_ endpoint: JSONValue, line: Int) -> ImportRow {
        guard let arn = endpoint["EndpointArn"]?.stringValue, let attributes = endpoint["Attributes"],
            let token = attributes["Token"]?.stringValue
        else { return .rejected(ImportRejection(line: line, reason: "an endpoint needs EndpointArn and Attributes.Token")) }
        let kind = arn.split(separator: ":").last.map { String($0.split(separator: "/").dropFirst().first ?? "") } ?? ""
        guard let made = SourceFormats.awsRecord(channel: kind, line: line, sourceKey: arn, address: token) else {
            return .rejected(ImportRejection(line: line, reason: "platform \(kind.prefix(32)) is not FCM or APNs"))
        }
        switch made {
        case var .success(r):
            r.messagingConsent = SourceFormats.bool(attributes["Enabled"])
            r.userID = SourceFormats.userID(attributes["CustomUserData"]?.stringValue)
            return .record(r)
        case let .failure(rejection): return .rejected(rejection)
        }
    }
}

/// Pinpoint's endpoint export: one endpoint a line (`ChannelType`, `Address`, `EndpointStatus`, `OptOut`,
/// `User.UserId`, `Attributes`, `EffectiveDate`, `CreationDate`, `Id`). Topics are the values of the attribute
/// `topics`, when the endpoint has one.
enum PinpointRows {
    static func row(_ e: JSONValue, line: Int) -> ImportRow {
        guard let channel = e["ChannelType"]?.stringValue, let address = e["Address"]?.stringValue else {
            return .rejected(ImportRejection(line: line, reason: "an endpoint needs ChannelType and Address"))
        }
        let key = "pinpoint:" + (e["Id"]?.stringValue ?? address)
        guard let made = SourceFormats.awsRecord(channel: channel, line: line, sourceKey: key, address: address) else {
            return .skipped  // email, SMS, voice, custom, Baidu, ADM: not a push token this registry holds
        }
        switch made {
        case var .success(r):
            let active = e["EndpointStatus"]?.stringValue.map { $0 == "ACTIVE" } ?? true
            let optedOut = e["OptOut"]?.stringValue == "ALL"
            r.messagingConsent = active && !optedOut
            r.userID = SourceFormats.userID(e["User"]?["UserId"]?.stringValue)
            r.createdAt = SourceTime.parse(e["CreationDate"]?.stringValue)
            r.lastSeenAt = SourceTime.parse(e["EffectiveDate"]?.stringValue) ?? r.createdAt
            r.refreshedAt = r.lastSeenAt
            r.consentTime = r.lastSeenAt
            let names = (e["Attributes"]?["topics"]?.arrayValue ?? []).compactMap(\.stringValue)
            r.topics = SourceFormats.topics(names, at: r.createdAt)
            if let platform = e["Demographic"]?["AppVersion"]?.stringValue { r.appVersion = platform }
            return .record(r)
        case let .failure(rejection): return .rejected(rejection)
        }
    }
}
