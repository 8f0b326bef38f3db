import Crypto
import Foundation

/// The push-registration rules: consent is the gate, tokens look like `<FID>:<opaque>`, one current token per
/// installation, an older refresh never replaces a newer one, topics follow the installation.
public struct RegistrationService: Sendable {
    let store: any RegistrationStore
    let installations: InstallationService
    public let clock: any WallClock

    public init(store: any RegistrationStore, installations: InstallationService, clock: any WallClock) {
        self.store = store
        self.installations = installations
        self.clock = clock
    }

    static func consentOff(_ fid: String) -> RegistryError {
        RegistryError(
            .failedPrecondition,
            "messaging consent (autoInitEnabled) is off for installation \(fid.prefix(64)); grant it first with PUT /v1/projects/{project}/installations/\(fid.prefix(64))/consent {\"autoInitEnabled\": true}, with the installation's auth token or the app's server key"
        )
    }

    private static func stored(_ write: RegistrationWrite, fid: String) throws -> (Registration, RefreshOutcome) {
        if case let .stored(registration, outcome) = write { return (registration, outcome) }
        throw error(write.kind, fid: fid)!
    }

    /// The error a write that came to `kind` answers; nil for a stored one.
    public static func error(_ kind: RegistrationWrite.Kind, fid: String) -> RegistryError? {
        switch kind {
        case .stored: return nil
        case .installationNotFound: return RegistryError(.notFound, "installation \(fid.prefix(64)) not found")
        case .consentOff: return consentOff(fid)
        case .clientTimeAhead:
            return RegistryError.invalid(
                "clientTime", "more than \(Int(RefreshOutcome.maxClientTimeAhead)) seconds ahead of the server's clock")
        }
    }

    /// The client's own registration (web, iOS or Android body): keeps its token when it has one, stamps the
    /// refresh. Refused when messaging consent is off, checked in the same transaction as the write.
    public func register(installation: Installation, _ request: ClientRegistration) async throws -> Registration {
        let now = clock.now()
        let registration = Registration(
            projectID: installation.projectID, fid: installation.fid,
            token: try RegistrationToken.new(fid: installation.fid), platform: request.platform,
            apnsToken: request.apns?.token, apnsEnvironment: request.apns?.environment, bundleID: request.bundleID,
            appVersion: request.appVersion, sdkVersion: request.sdkVersion, web: request.web, createdAt: now,
            refreshedAt: now)
        let (stored, _) = try RegistrationService.stored(
            try await store.register(registration), fid: installation.fid)
        try await installations.noteActivity(installation)
        return stored
    }

    /// The token refresh callback from an app backend; `audit` is appended with the write.
    public func refresh(
        project: Project, fid: String, _ report: TokenRefresh, audit: AuditCompanion<RegistrationWrite.Kind>? = nil
    ) async throws -> (Registration, RefreshOutcome) {
        guard RegistrationToken.isValid(report.token) else {
            throw RegistryError.invalid(
                "token", "1-\(RegistrationToken.maxBytes) characters of A-Z a-z 0-9 _ : . -")
        }
        if let clientTime = report.clientTime, clientTime < RefreshOutcome.earliestClientTime {
            throw RegistryError.invalid("clientTime", "must not be before 2000-01-01T00:00:00Z")
        }
        let now = clock.now()
        let registration = Registration(
            projectID: project.id, fid: fid, token: report.token, platform: report.platform,
            apnsToken: report.apns?.token, apnsEnvironment: report.apns?.environment, clientTime: report.clientTime,
            createdAt: now, refreshedAt: now)
        return try RegistrationService.stored(try await store.refresh(registration, audit: audit), fid: fid)
    }

    /// The registration a path names, by token or FID.
    public func find(project: Project, tokenOrFID: String) async throws -> Registration? {
        if Identifiers.isValidFID(tokenOrFID), let byFID = try await store.find(projectID: project.id, fid: tokenOrFID)
        {
            return byFID
        }
        guard RegistrationToken.isValid(tokenOrFID) else { return nil }
        return try await store.find(projectID: project.id, token: tokenOrFID)
    }

    /// The installation a path names, by FID or by one of its tokens (topic routes accept both).
    public func installationFID(project: Project, tokenOrFID: String) async throws -> String? {
        if Identifiers.isValidFID(tokenOrFID), try await installations.find(project: project, fid: tokenOrFID) != nil {
            return tokenOrFID
        }
        return try await find(project: project, tokenOrFID: tokenOrFID)?.fid
    }

    /// The installations of a batch of registration tokens, in one look-up; invalid and unknown tokens are absent.
    public func fids(project: Project, tokens: [String]) async throws -> [String: String] {
        let valid = Set(tokens.filter(RegistrationToken.isValid))
        guard !valid.isEmpty else { return [:] }
        return try await store.fids(projectID: project.id, tokens: Array(valid))
    }

    /// The installation of each registration token or FID in a batch (FID-mode clients hand apps their FID, so
    /// every route that takes a token takes an FID too); two look-ups for the whole batch. Inputs that name no live
    /// installation are absent.
    public func installationFIDs(project: Project, tokensOrFIDs: [String]) async throws -> [String: String] {
        var resolved = try await fids(project: project, tokens: tokensOrFIDs)
        let unresolved = tokensOrFIDs.filter { resolved[$0] == nil && Identifiers.isValidFID($0) }
        for fid in try await installations.existing(project: project, fids: Array(Set(unresolved))) {
            resolved[fid] = fid
        }
        return resolved
    }

    public func delete(project: Project, fid: String) async throws -> Bool {
        try await store.delete(projectID: project.id, fid: fid)
    }

    /// What became of one APNs token of a `batchImport`.
    public enum ImportOutcome: Sendable, Equatable {
        case imported(apnsToken: String, registrationToken: String)
        /// Not a hexadecimal APNs token.
        case invalid
        /// The app's installations start opted out of messaging, so no registration can be made for it.
        case noConsent(apnsToken: String)
    }

    /// `batchImport`: each APNs token of an iOS app gets an installation and a registration made by the server, in
    /// one transaction; a token imported before returns its existing registration token.
    ///
    /// - Parameter apnsTokens: the request's items, nil for an item that is not a string.
    public func importAPNs(project: Project, app: App, apnsTokens: [String?], sandbox: Bool) async throws
        -> [ImportOutcome]
    {
        let environment: APNsEnvironment = sandbox ? .sandbox : .production
        let devices: [APNsDevice?] = apnsTokens.map { text in
            text.flatMap {
                try? APNsDevice(token: $0, environment: nil, tokenField: "apns_tokens", environmentField: "sandbox")
            }
        }
        var items: [APNsImport] = []
        var planned = Set<String>()
        let now = clock.now()
        for device in devices.compactMap({ $0 }) where planned.insert(device.token).inserted {
            let fid = try Identifiers.newFID()
            items.append(
                APNsImport(
                    apnsToken: device.token,
                    installation: Installation(
                        projectID: project.id, fid: fid, appID: app.id,
                        refreshTokenHash: SHA256.hash(try Identifiers.newRefreshToken()), sdkVersion: "iid-import",
                        createdAt: now, lastSeenAt: now),
                    fidHash: installations.fidHasher.hash(projectID: project.id, fid: fid),
                    registration: Registration(
                        projectID: project.id, fid: fid, token: try RegistrationToken.new(fid: fid), platform: .ios,
                        apnsToken: device.token, apnsEnvironment: environment, bundleID: app.bundleID,
                        createdAt: now, refreshedAt: now)))
        }
        let tokens = try await store.importAPNs(
            items, initialConsent: app.autoInitDefault, create: app.autoInitDefault)
        return devices.map { device in
            guard let device else { return .invalid }
            guard let token = tokens[device.token] else { return .noConsent(apnsToken: device.token) }
            return .imported(apnsToken: device.token, registrationToken: token)
        }
    }
}
