import Foundation
import JSON
import Registry
import Testing

/// Each source format read from a sample built from its vendor's documented columns:
/// - OneSignal: documentation.onesignal.com/reference/csv-export (columns, `device_type`, `invalid_identifier`) and
///   documentation.onesignal.com/docs/en/subscriptions (`notification_types`);
/// - fcm-django: xtrinch/fcm-django `fcm_django/models.py` (`FCMDevice`), Django's `dumpdata` JSON;
/// - django-push-notifications: jazzband/django-push-notifications `push_notifications/models.py`;
/// - SNS: docs.aws.amazon.com/sns/latest/api/API_ListEndpointsByPlatformApplication.html;
/// - Pinpoint: docs.aws.amazon.com/pinpoint/latest/developerguide/audience-data-export.html (EndpointResponse).
@Suite("Import formats")
struct ImportFormatTests {
    static func rows(_ format: ImportFormat, _ text: String) throws -> [ImportRow] {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("import-\(UUID().uuidString)")
        try Data(text.utf8).write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        var reader = SourceFormats.reader(format, SourceBytes(try FileHandle(forReadingFrom: url)))
        var rows: [ImportRow] = []
        while let row = try reader.next() { rows.append(row) }
        return rows
    }

    /// One registry-format line, read as `import` reads it.
    static func registryRow(_ line: JSONValue) -> ImportRow {
        (try? rows(.registry, line.text).first) ?? .skipped
    }

    static func records(_ rows: [ImportRow]) -> [ImportRecord] {
        rows.compactMap { if case let .record(r) = $0 { return r } else { return nil } }
    }

    static func rejections(_ rows: [ImportRow]) -> [ImportRejection] {
        rows.compactMap { if case let .rejected(r) = $0 { return r } else { return nil } }
    }

    static let apns = "7abcd558f29d0b1f048083e2834ad8ea4b3d87d8ad9c088b33c132706ff445f0"
    static let fcm = "dQGm89TZQXiTvLsRIj_GBo:APA91bpgqFexampletokenbody0123456789"

    @Test func oneSignalPlayersExport() throws {
        let csv = """
            id,identifier,session_count,language,timezone,game_version,device_os,device_type,device_model,ad_id,tags,last_active,playtime,amount_spent,created_at,invalid_identifier,badge_count,external_user_id,notification_types,web_auth,web_p256
            a1,\(Self.apns),12,en,-28800,1.4.2,17.4,0,"iPhone15,2",,"{""plan"":""pro"",""beta"":""0"",""vip"":true}",1730000000,5400,0,1700000000,f,0,user_42,1,,
            a2,\(Self.fcm),3,de,3600,,14,1,Pixel 8,,{},1729900000,0,0,1701000000,t,0,,-2,,
            a3,https://fcm.googleapis.com/fcm/send/eXabc,3,de,3600,,120,5,Linux,,,1729900000,0,0,1701000000,f,0,user_42,1,tBHItJI5svbpez7KI4CCXg,BNcRdreALRFXTkOOUHK1EtK2
            a4,bob@example.com,3,de,3600,,120,11,Linux,,{},1729900000,0,0,1701000000,f,0,,1,,
            a5,nothex!,3,de,3600,,120,0,Linux,,{},1729900000,0,0,1701000000,f,0,,1,,
            "a6","line
            break",1,en,0,,1,1,x,,{},1729900000,0,0,1701000000,f,0,,1,,

            """
        let rows = try Self.rows(.oneSignalCSV, csv)
        let records = Self.records(rows)
        #expect(records.count == 3)
        let ios = try #require(records.first { $0.platform == .ios })
        #expect(ios.apnsToken == Self.apns && ios.token == nil && ios.fid == nil && ios.apnsEnvironment == nil)
        #expect(ios.messagingConsent == true && ios.userID == "user_42" && ios.appVersion == "1.4.2")
        #expect(ios.topics.map(\.topic).sorted() == ["plan", "vip"])
        #expect(ios.lastSeenAt == Date(timeIntervalSince1970: 1_730_000_000))
        #expect(ios.createdAt == Date(timeIntervalSince1970: 1_700_000_000))
        let android = try #require(records.first { $0.platform == .android })
        #expect(android.token == Self.fcm && android.fid == "dQGm89TZQXiTvLsRIj_GBo")
        #expect(android.messagingConsent == false, "notification_types -2 with invalid_identifier t: unsubscribed")
        let web = try #require(records.first { $0.platform == .web })
        #expect(web.web?.endpoint == "https://fcm.googleapis.com/fcm/send/eXabc" && web.web?.auth == "tBHItJI5svbpez7KI4CCXg")
        // The email row is skipped; the bad token and the quoted line break (not a token) are rejected by line.
        #expect(Self.rejections(rows).map(\.line) == [6, 7])
    }

    @Test func djangoDumps() throws {
        let fcmDjango = """
            [{"model": "fcm_django.fcmdevice", "pk": 1, "fields": {"name": "Pixel 8", "active": true, "user": 42,
              "date_created": "2024-05-01T12:34:56.789Z", "device_id": "a1b2", "registration_id": "\(Self.fcm)", "type": "android"}},
             {"model": "fcm_django.fcmdevice", "pk": 2, "fields": {"name": null, "active": false, "user": null,
              "date_created": "2024-05-02T00:00:00Z", "device_id": null, "registration_id": "cAAAAAAAAAAAAAAAAAAAAA:APA91bX", "type": "ios"}},
             {"model": "auth.user", "pk": 42, "fields": {"username": "ana"}}]
            """
        let rows = try Self.rows(.fcmDjango, fcmDjango)
        let records = Self.records(rows)
        #expect(records.map(\.platform) == [.android, .ios])
        #expect(records[0].userID == "42" && records[0].messagingConsent == true)
        #expect(records[1].messagingConsent == false && records[1].fid == "cAAAAAAAAAAAAAAAAAAAAA")
        #expect(records[0].createdAt == Date(timeIntervalSince1970: 1_714_566_896.789))
        let dpn = """
            [{"model":"push_notifications.apnsdevice","pk":7,"fields":{"name":"Ana's iPhone","active":true,"user":42,"date_created":"2024-03-02T09:10:11.123Z","application_id":"ios_prod","device_id":"c51c57d9-8898-4584-94d8-81d49b21eb2a","registration_id":"\(Self.apns)"}},
             {"model":"push_notifications.gcmdevice","pk":3,"fields":{"name":null,"active":true,"user":42,"date_created":"2024-03-02T09:12:00Z","application_id":null,"device_id":271692603,"registration_id":"\(Self.fcm)","cloud_message_type":"FCM"}},
             {"model":"push_notifications.webpushdevice","pk":1,"fields":{"name":null,"active":true,"user":null,"date_created":"2024-03-03T00:00:00Z","application_id":null,"registration_id":"https://fcm.googleapis.com/fcm/send/eX","p256dh":"BNcRdre","auth":"tBHItJI5","browser":"CHROME"}},
             {"model":"push_notifications.wnsdevice","pk":1,"fields":{"registration_id":"https://wns.example/x"}}]
            """
        let more = Self.records(try Self.rows(.pushNotifications, dpn))
        #expect(more.map(\.platform) == [.ios, .android, .web])
        #expect(more[0].apnsToken == Self.apns && more[0].apnsEnvironment == nil && more[0].userID == "42")
        #expect(more[2].web?.p256dh == "BNcRdre")
    }

    @Test func amazonSNSAndPinpoint() throws {
        let pages = """
            {"Endpoints": [
              {"EndpointArn": "arn:aws:sns:us-west-2:123456789012:endpoint/GCM/gcmpushapp/5e3e9847-3183-3f18-a7e8-671c3a57d4b3",
               "Attributes": {"Enabled": "true", "CustomUserData": "UserId=27576823", "Token": "\(Self.fcm)"}},
              {"EndpointArn": "arn:aws:sns:us-west-2:123456789012:endpoint/APNS_SANDBOX/myapp-dev/3447299f-275f-329f-b71f-d1f6945033ba",
               "Attributes": {"Enabled": "false", "Token": "\(Self.apns)"}},
              {"EndpointArn": "arn:aws:sns:us-west-2:123456789012:endpoint/ADM/kindle/1", "Attributes": {"Token": "x"}}],
             "NextToken": "abc"}
            {"Endpoints": [{"EndpointArn": "arn:aws:sns:us-west-2:1:endpoint/APNS/app/2", "Attributes": {"Enabled": "true", "Token": "\(Self.apns.uppercased())"}}]}
            """
        let rows = try Self.rows(.sns, pages)
        let records = Self.records(rows)
        #expect(records.count == 3 && Self.rejections(rows).count == 1)
        #expect(records[0].platform == .android && records[0].messagingConsent == true)
        #expect(records[0].userID == "UserId=27576823")
        #expect(records[1].apnsEnvironment == .sandbox && records[1].messagingConsent == false)
        #expect(records[2].apnsEnvironment == .production && records[2].apnsToken == Self.apns)
        let lines = """
            {"ChannelType":"APNS","Address":"\(Self.apns)","EndpointStatus":"ACTIVE","OptOut":"NONE","EffectiveDate":"2025-02-12T11:20:13.628Z","Attributes":{"topics":["news","sport"]},"User":{"UserId":"example-user-id-2"},"Id":"qqwpv9dcsid7280cfke","CreationDate":"2025-02-11T11:20:13.628Z"}
            {"ChannelType":"GCM","Address":"\(Self.fcm)","EndpointStatus":"INACTIVE","OptOut":"ALL","EffectiveDate":"2025-02-12T11:20:13.631Z","Attributes":{},"User":{"UserId":"example-user-id-3"},"Id":"nolc1ypyigmx","CreationDate":"2025-02-12T11:20:13.631Z"}
            {"ChannelType":"EMAIL","Address":"a@example.com","Id":"e1"}
            not json at all
            """
        let pinpoint = try Self.rows(.pinpoint, lines)
        let endpoints = Self.records(pinpoint)
        #expect(endpoints.count == 2 && Self.rejections(pinpoint).map(\.line) == [4])
        #expect(endpoints[0].topics.map(\.topic) == ["news", "sport"] && endpoints[0].messagingConsent == true)
        #expect(endpoints[0].userID == "example-user-id-2" && endpoints[0].apnsEnvironment == .production)
        #expect(endpoints[1].messagingConsent == false)
    }

    /// An SNS page is read one endpoint at a time: a page of 300,000 (the AWS CLI joins every page of a platform
    /// application into one) costs its parsed JSON and one row, and each endpoint is handed out in constant time
    /// (rows made all at once and taken from the front were gigabytes and quadratic: days for a 16 MiB page).
    @Test func aLargeSNSPageIsReadOneEndpointAtATime() throws {
        let count = 300_000
        let endpoint = #"{"EndpointArn":"arn:aws:sns:us-west-2:1:endpoint/GCM/app/1","Attributes":{"Token":"t"}}"#
        let page = #"{"Endpoints":["# + Array(repeating: "{}", count: count - 1).joined(separator: ",") + "," + endpoint
            + "]}"
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("import-\(UUID().uuidString)")
        try Data(page.utf8).write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        var reader = SourceFormats.reader(.sns, SourceBytes(try FileHandle(forReadingFrom: url)))
        let started = ContinuousClock.now
        var (rejected, records) = (0, 0)
        while let row = try reader.next() {
            switch row {
            case .rejected: rejected += 1
            case .record: records += 1
            default: break
            }
        }
        #expect(rejected == count - 1 && records == 1)
        // A bound a linear reader meets by far (about a second in a debug build), and a quadratic one never does.
        #expect(ContinuousClock.now - started < .seconds(60))
    }

    /// What a reader holds of a row is bounded, however the row is made: a field of escaped quotes (`""` pairs skipped
    /// the field's check), a row of a million fields, a line of junk before a JSON value (kept whole, to show 40 bytes).
    @Test func aRowsBytesAreBoundedWhateverItsShape() throws {
        let header = "id,identifier,device_type\n"
        let escapes = "a1,\"" + String(repeating: "\"\"", count: (1 << 20) + 8) + "\",1\n"
        #expect(throws: ImportError.self) { _ = try Self.rows(.oneSignalCSV, header + escapes) }
        let commas = "a1," + String(repeating: ",", count: 200_000) + "\n"
        #expect(throws: ImportError.self) { _ = try Self.rows(.oneSignalCSV, header + commas) }
        let junk = String(repeating: "x", count: 3 << 20) + "\n"
        let rejected = Self.rejections(try Self.rows(.pinpoint, junk))
        #expect(rejected.count == 1)
        #expect(rejected.first.map { $0.reason.utf8.count < 100 } == true)
    }

    /// A record of the registry's own format holds what an installation may: at most 32 consent purposes and 2000
    /// topics, each purpose a valid name (they were taken as many as the file had).
    @Test func aRegistryRecordHoldsWhatAnInstallationMay() throws {
        let header = String(decoding: RegistryExportFormat.header(projectID: "demo-proj").encoded(), as: UTF8.self)
        func line(consents: Int, topics: Int, purpose: (Int) -> String = { "p\($0)" }) -> String {
            let record: JSONValue = [
                "fid": "dIsVQ2QVRT-TsRovAPrE3U", "createTime": "2026-01-01T00:00:00Z",
                "lastSeenTime": "2026-01-02T00:00:00Z",
                "consents": .array((0..<consents).map { n in
                    ["purpose": .string(purpose(n)), "granted": true, "actor": "installation", "updateTime": "2026-01-01T00:00:00Z"]
                }),
                "topics": .array((0..<topics).map { n in ["topic": .string("t\(n)"), "createTime": "2026-01-01T00:00:00Z"] }),
            ]
            return header + "\n" + String(decoding: record.encoded(), as: UTF8.self) + "\n"
        }
        #expect(Self.records(try Self.rows(.registry, line(consents: 32, topics: 2000))).count == 1)
        let purposes = Self.rejections(try Self.rows(.registry, line(consents: 33, topics: 0)))
        #expect(purposes.first?.reason.hasPrefix("consents") == true)
        let topics = Self.rejections(try Self.rows(.registry, line(consents: 0, topics: 2001)))
        #expect(topics.first?.reason.hasPrefix("topics") == true)
        let invalid = Self.rejections(try Self.rows(.registry, line(consents: 1, topics: 0, purpose: { _ in "a\u{0}b" })))
        #expect(invalid.first?.reason.hasPrefix("consents") == true)
    }

    /// Arbitrary bytes never crash a reader: each row becomes a record, a rejection or a skip.
    @Test func arbitraryBytesAreRowsOrRejections() throws {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("{}[]\",:\\\n\r abc01tf-\u{00e9}".utf8)
        for format in ImportFormat.allCases {
            for _ in 0..<30 {
                let bytes = (0..<Int.random(in: 0..<400, using: &generator)).map { _ in
                    alphabet[Int.random(in: 0..<alphabet.count, using: &generator)]
                }
                let text = String(decoding: bytes, as: UTF8.self)
                do {
                    _ = try Self.rows(format, text)
                } catch is ImportError {
                    // A source that is not one at all (a CSV without its header) is refused as a whole.
                }
            }
        }
    }
}
