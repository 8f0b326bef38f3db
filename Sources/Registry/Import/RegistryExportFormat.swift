import Foundation
import JSON

/// Everything held about one installation, as a project's export carries it.
public struct ExportedInstallation: Sendable, Equatable {
    public var installation: Installation
    /// The source an installation made by an import for a token without an FID came from.
    public var importedFrom: String?
    public var registration: Registration?
    public var senderTokens: [SenderTokenRecord]
    public var consents: [ConsentState]
    public var ledger: [ConsentEvent]
    public var topics: [TopicSubscription]
    public var binding: UserBinding?

    public init(
        installation: Installation, importedFrom: String?, registration: Registration?,
        senderTokens: [SenderTokenRecord], consents: [ConsentState], ledger: [ConsentEvent],
        topics: [TopicSubscription], binding: UserBinding?
    ) {
        self.installation = installation
        self.importedFrom = importedFrom
        self.registration = registration
        self.senderTokens = senderTokens
        self.consents = consents
        self.ledger = ledger
        self.topics = topics
        self.binding = binding
    }
}

/// The registry's own export: JSON lines, a header line `{"format":"tokenregistry.export/1","project":…}` then one
/// line an installation, in FID order, with its tokens in clear (the project owner taking its data). It is what
/// `import --format registry` reads: export, import into an empty database (its apps made with the same IDs), export
/// again gives the same lines.
public enum RegistryExportFormat {
    public static let version = "tokenregistry.export/1"

    public static func header(projectID: String) -> JSONValue {
        ["format": .string(version), "project": .string(projectID)]
    }

    static func time(_ date: Date?) -> JSONValue { date.map { .string(Timestamp.rfc3339($0)) } ?? .null }
    static func string(_ text: String?) -> JSONValue { text.map { .string($0) } ?? .null }

    /// One installation's line; `freshness` judges its registration at `now`. With `ledger: false`, without its `consentLedger` (written after the rest, a page at
    /// a time, by ``ImportService/export(project:pageSize:_:)``).
    public static func line(_ e: ExportedInstallation, freshness: Freshness, at now: Date, ledger: Bool = true)
        -> JSONValue
    {
        let i = e.installation
        var registration: JSONValue = .null
        if let r = e.registration {
            let age = now.timeIntervalSince(r.refreshedAt)
            let fresh = age > freshness.expireAfter ? "expired" : age > freshness.staleAfter ? "stale" : "fresh"
            registration = [
                "token": .string(r.token), "platform": .string(r.platform.rawValue), "state": .string(r.state.rawValue),
                "freshness": .string(fresh), "apnsToken": string(r.apnsToken),
                "apnsEnvironment": string(r.apnsEnvironment?.rawValue), "bundleId": string(r.bundleID),
                "appVersion": string(r.appVersion), "sdkVersion": string(r.sdkVersion),
                "webPush": r.web.map {
                    [
                        "endpoint": .string($0.endpoint), "auth": .string($0.auth), "p256dh": .string($0.p256dh),
                        "applicationPubKey": string($0.applicationPubKey), "origin": string($0.origin),
                    ]
                } ?? .null,
                "clientTime": time(r.clientTime), "createTime": time(r.createdAt), "refreshTime": time(r.refreshedAt),
                "retirement": r.retirement.map {
                    [
                        "reason": .string($0.reason), "channel": .string($0.channel.rawValue), "time": time($0.at),
                        "invalidSince": time($0.invalidSince),
                    ]
                } ?? .null,
                "quarantine": r.quarantine.map {
                    [
                        "reason": .string($0.reason), "channel": .string($0.channel.rawValue), "time": time($0.at),
                        "byBreaker": .bool($0.byBreaker),
                    ]
                } ?? .null,
            ]
        }
        let line: JSONValue = [
            "fid": .string(i.fid), "appId": .string(i.appID), "sdkVersion": string(i.sdkVersion),
            "createTime": time(i.createdAt), "lastSeenTime": time(i.lastSeenAt), "importedFrom": string(e.importedFrom),
            "registration": registration,
            "senderTokens": .array(
                e.senderTokens.map {
                    [
                        "sender": .string($0.sender), "scope": .string($0.scope), "token": .string($0.token),
                        "createTime": time($0.createdAt), "refreshTime": time($0.refreshedAt),
                    ]
                }),
            "consents": .array(
                e.consents.map {
                    [
                        "purpose": .string($0.purpose), "granted": .bool($0.granted),
                        "policyVersion": string($0.policyVersion), "source": string($0.source),
                        "actor": .string($0.actor.rawValue), "updateTime": time($0.updatedAt),
                    ]
                }),
            "topics": .array(e.topics.map { ["topic": .string($0.topic), "createTime": time($0.createdAt)] }),
            "user": e.binding.map { ["userId": .string($0.userID), "bindTime": time($0.boundAt)] } ?? .null,
        ]
        guard ledger, case let .object(members) = line else { return line }
        return .object(members + [("consentLedger", .array(e.ledger.map(ledgerEntry)))])
    }

    /// One entry of an installation's consent ledger, as a line holds it.
    public static func ledgerEntry(_ c: ConsentEvent) -> JSONValue {
        [
            "purpose": .string(c.purpose), "granted": .bool(c.granted), "previous": c.previous.map { .bool($0) } ?? .null,
            "actor": .string(c.actor.rawValue), "source": string(c.source), "policyVersion": string(c.policyVersion),
            "recordTime": time(c.recordedAt),
        ]
    }

    /// A line read back (``ImportFormat/registry``).
    static func row(_ v: JSONValue, line: Int) -> ImportRow {
        if v["format"] != nil {
            guard v["format"]?.stringValue == version else {
                return .rejected(ImportRejection(line: line, reason: "format: not \(version)"))
            }
            return .skipped
        }
        func fail(_ reason: String) -> ImportRow { .rejected(ImportRejection(line: line, reason: reason)) }
        guard let fid = v["fid"]?.stringValue, Identifiers.isValidFID(fid) else { return fail("fid: not an FID") }
        guard let created = SourceTime.parse(v["createTime"]?.stringValue),
            let seen = SourceTime.parse(v["lastSeenTime"]?.stringValue)
        else { return fail("createTime, lastSeenTime: required times") }
        let r = v["registration"]
        let platform = r?["platform"]?.stringValue.flatMap(Platform.init(rawValue:)) ?? .android
        var record = ImportRecord(line: line, sourceKey: "fid:" + fid, platform: platform)
        record.fid = fid
        record.appID = v["appId"]?.stringValue
        record.sdkVersion = v["sdkVersion"]?.stringValue
        record.createdAt = created
        record.lastSeenAt = seen
        record.importedFrom = v["importedFrom"]?.stringValue
        if let r, r != .null {
            guard let token = r["token"]?.stringValue, RegistrationToken.isValid(token) else { return fail("registration.token: not a registration token") }
            guard let state = r["state"]?.stringValue.flatMap(RegistrationState.init(rawValue:)),
                let refreshed = SourceTime.parse(r["refreshTime"]?.stringValue),
                let made = SourceTime.parse(r["createTime"]?.stringValue)
            else { return fail("registration: state, createTime, refreshTime required") }
            var reg = Registration(
                projectID: "", fid: fid, token: token, platform: platform,
                apnsToken: r["apnsToken"]?.stringValue?.lowercased(),  // stored in lower case, as the API stores it
                apnsEnvironment: r["apnsEnvironment"]?.stringValue.flatMap(APNsEnvironment.init(rawValue:)),
                bundleID: r["bundleId"]?.stringValue, appVersion: r["appVersion"]?.stringValue,
                sdkVersion: r["sdkVersion"]?.stringValue, state: state,
                clientTime: SourceTime.parse(r["clientTime"]?.stringValue), createdAt: made, refreshedAt: refreshed)
            if let w = r["webPush"], w != .null {
                reg.web = WebPush(
                    endpoint: w["endpoint"]?.stringValue ?? "", auth: w["auth"]?.stringValue ?? "",
                    p256dh: w["p256dh"]?.stringValue ?? "", applicationPubKey: w["applicationPubKey"]?.stringValue,
                    origin: w["origin"]?.stringValue)
            }
            if let t = r["retirement"], t != .null, let channel = t["channel"]?.stringValue.flatMap(FeedbackChannel.init),
                let at = SourceTime.parse(t["time"]?.stringValue)
            {
                reg.retirement = Retirement(
                    reason: t["reason"]?.stringValue ?? "", channel: channel, at: at,
                    invalidSince: SourceTime.parse(t["invalidSince"]?.stringValue))
            }
            if let q = r["quarantine"], q != .null, let channel = q["channel"]?.stringValue.flatMap(FeedbackChannel.init),
                let at = SourceTime.parse(q["time"]?.stringValue)
            {
                reg.quarantine = Quarantine(
                    reason: q["reason"]?.stringValue ?? "", channel: channel, at: at,
                    byBreaker: q["byBreaker"]?.boolValue ?? false)
            }
            record.registration = reg
            record.token = token
            record.refreshedAt = refreshed
        }
        // What the API would refuse an installation is refused a record too: its purposes and topics have the same
        // bounds (a file from elsewhere is input like any other).
        let consents = v["consents"]?.arrayValue ?? []
        guard consents.count <= ConsentService.maxPurposes else {
            return fail("consents: more than \(ConsentService.maxPurposes) purposes")
        }
        guard (v["topics"]?.arrayValue?.count ?? 0) <= Topic.maxPerInstallation else {
            return fail("topics: more than \(Topic.maxPerInstallation)")
        }
        for c in consents {
            guard let purpose = c["purpose"]?.stringValue, ConsentService.isValidPurpose(purpose),
                let granted = c["granted"]?.boolValue,
                let actor = c["actor"]?.stringValue.flatMap(ConsentActor.init(rawValue:)),
                let at = SourceTime.parse(c["updateTime"]?.stringValue)
            else { return fail("consents: purpose, granted, actor, updateTime required") }
            record.consents.append(
                ConsentState(
                    purpose: purpose, granted: granted, policyVersion: c["policyVersion"]?.stringValue,
                    source: c["source"]?.stringValue, actor: actor, updatedAt: at))
        }
        for (n, c) in (v["consentLedger"]?.arrayValue ?? []).enumerated() {
            guard let purpose = c["purpose"]?.stringValue, ConsentService.isValidPurpose(purpose),
                let granted = c["granted"]?.boolValue,
                let actor = c["actor"]?.stringValue.flatMap(ConsentActor.init(rawValue:)),
                let at = SourceTime.parse(c["recordTime"]?.stringValue)
            else { return fail("consentLedger[\(n)]: purpose, granted, actor, recordTime required") }
            record.ledger.append(
                ConsentEvent(
                    sequence: Int64(n), purpose: purpose, granted: granted, previous: c["previous"]?.boolValue,
                    actor: actor, source: c["source"]?.stringValue, policyVersion: c["policyVersion"]?.stringValue,
                    recordedAt: at))
        }
        record.messagingConsent = record.consents.first { $0.purpose == ConsentService.messaging }?.granted
        for t in v["topics"]?.arrayValue ?? [] {
            guard let name = t["topic"]?.stringValue, Topic.isValid(name) else { return fail("topics: a name not valid") }
            record.topics.append(
                TopicSubscription(topic: name, createdAt: SourceTime.parse(t["createTime"]?.stringValue) ?? created))
        }
        if let u = v["user"], u != .null {
            guard let id = SourceFormats.userID(u["userId"]?.stringValue) else { return fail("user.userId: not a user ID") }
            record.userID = id
            record.boundAt = SourceTime.parse(u["bindTime"]?.stringValue)
        }
        for s in v["senderTokens"]?.arrayValue ?? [] {
            guard let sender = s["sender"]?.stringValue, let scope = s["scope"]?.stringValue,
                let token = s["token"]?.stringValue, RegistrationToken.isValid(token)
            else { return fail("senderTokens: sender, scope, token required") }
            record.senderTokens.append(
                SenderTokenRecord(
                    sender: sender, scope: scope, token: token,
                    createdAt: SourceTime.parse(s["createTime"]?.stringValue) ?? created,
                    refreshedAt: SourceTime.parse(s["refreshTime"]?.stringValue) ?? created))
        }
        return .record(record)
    }
}
