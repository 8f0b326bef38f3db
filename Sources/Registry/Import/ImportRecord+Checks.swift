/// What the API would refuse an installation, an import refuses a record: every field a file carries is checked by the
/// rule its route applies, in one place that every format's rows pass (``ImportService/plan(_:project:apps:format:)``).
/// A file from elsewhere is input like any other: a NUL in a version string, an APNs token of 3,000 characters (an
/// indexed column) or a sender of any length would otherwise reach PostgreSQL and fail the whole batch's statement,
/// and an import resumed after it would fail on the same row every time.
extension ImportRecord {
    /// The first field that breaks its rule, with the rule; nil when the record may be stored.
    public func refusal() -> String? {
        var checks: [String?] = [
            Self.text("appId", appID, max: 128), Self.text("sdkVersion", sdkVersion, max: 64),
            Self.text("appVersion", appVersion, max: 64), Self.text("bundleId", bundleID, max: 255),
            Self.text("importedFrom", importedFrom, max: 64),
            Self.token("token", token), Self.apns("apnsToken", apnsToken), web.flatMap { Self.web("webPush", $0) },
        ]
        if let userID, (try? UserService.validate(userID: userID)) == nil {
            checks.append("user.userId: not a user ID (1-\(UserService.maxUserIDLength) printable characters)")
        }
        checks.append(consentRefusal())
        checks.append(ledgerRefusal())
        if topics.count > Topic.maxPerInstallation {
            checks.append("topics: more than \(Topic.maxPerInstallation)")
        }
        if let bad = topics.first(where: { !Topic.isValid($0.topic) }) {
            checks.append("topics: \(bad.topic.prefix(64)) is not a topic name")
        }
        if senderTokens.count > RegistrationService.maxSenderTokens {
            checks.append("senderTokens: more than \(RegistrationService.maxSenderTokens)")
        }
        for s in senderTokens {
            checks.append(Self.text("senderTokens.sender", s.sender, max: 256, empty: false))
            checks.append(Self.text("senderTokens.scope", s.scope, max: 256, empty: false))
            checks.append(Self.token("senderTokens.token", s.token))
        }
        if let r = registration { checks.append(Self.registration(r)) }
        return checks.lazy.compactMap { $0 }.first
    }

    private func consentRefusal() -> String? {
        if consents.count > ConsentService.maxPurposes { return "consents: more than \(ConsentService.maxPurposes)" }
        for c in consents {
            if let bad = Self.consent("consents", purpose: c.purpose, source: c.source, policy: c.policyVersion) {
                return bad
            }
        }
        return nil
    }

    private func ledgerRefusal() -> String? {
        for e in ledger {
            if let bad = Self.consent("consentLedger", purpose: e.purpose, source: e.source, policy: e.policyVersion) {
                return bad
            }
        }
        return nil
    }

    private static func consent(_ field: String, purpose: String, source: String?, policy: String?) -> String? {
        guard ConsentService.isValidPurpose(purpose) else { return "\(field).purpose: not a purpose name" }
        return text("\(field).source", source, max: 128) ?? text("\(field).policyVersion", policy, max: 128)
    }

    private static func registration(_ r: Registration) -> String? {
        let checks: [String?] = [
            token("registration.token", r.token), apns("registration.apnsToken", r.apnsToken),
            text("registration.bundleId", r.bundleID, max: 255), text("registration.appVersion", r.appVersion, max: 64),
            text("registration.sdkVersion", r.sdkVersion, max: 64),
            r.web.flatMap { web("registration.webPush", $0) },
            text("registration.retirement.reason", r.retirement?.reason, max: 64),
            text("registration.quarantine.reason", r.quarantine?.reason, max: 64),
        ]
        return checks.lazy.compactMap { $0 }.first
    }

    /// Printable text of at most `max` bytes (no control characters, so no NUL).
    private static func text(_ field: String, _ value: String?, max: Int, empty: Bool = true) -> String? {
        guard let value else { return nil }
        guard empty || !value.isEmpty else { return "\(field): must not be empty" }
        guard value.utf8.count <= max else { return "\(field): longer than \(max) bytes" }
        guard Identifiers.isPlainText(value) else { return "\(field): must not contain control characters" }
        return nil
    }

    private static func token(_ field: String, _ value: String?) -> String? {
        guard let value, !RegistrationToken.isValid(value) else { return nil }
        return "\(field): not a registration token"
    }

    private static func apns(_ field: String, _ value: String?) -> String? {
        guard let value else { return nil }
        guard (try? APNsDevice(token: value, environment: nil, tokenField: field, environmentField: "")) != nil else {
            return "\(field): not an APNs device token (1-200 hexadecimal characters)"
        }
        return nil
    }

    /// A web push subscription by the registrations route's rule (``WebPush/refusal``).
    private static func web(_ field: String, _ w: WebPush) -> String? {
        w.refusal.map { "\(field).\($0.field): \($0.reason)" }
    }

    /// The same record without the optional facts a third-party source reported that this registry would not take
    /// (an app or SDK version over 64 bytes or with control characters, a bundle ID over 255): the register API
    /// drops such a value too, and the device and its token are what an import is for. The registry's own export is
    /// taken whole or refused (``refusal()``).
    public func droppingUnfitFacts() -> ImportRecord {
        var r = self
        if Self.text("", r.appVersion, max: 64) != nil { r.appVersion = nil }
        if Self.text("", r.sdkVersion, max: 64) != nil { r.sdkVersion = nil }
        if Self.text("", r.bundleID, max: 255) != nil { r.bundleID = nil }
        return r
    }
}
