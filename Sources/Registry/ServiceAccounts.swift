import Crypto
import Foundation
import JSON

/// A service account of a project: what the registry keeps of it (never the private key).
public struct ServiceAccount: Sendable, Equatable {
    public let projectID: String
    /// `private_key_id` in the credential file; the `kid` of its assertions.
    public let keyID: String
    public let clientEmail: String
    public let publicKeyPEM: String
    /// The file's `token_uri`, accepted as an assertion audience beside Google's own.
    public let tokenURI: String
    public let createdAt: Date
    /// When the operator revoked it: its assertions and access tokens stop working.
    public let revokedAt: Date?

    public init(
        projectID: String, keyID: String, clientEmail: String, publicKeyPEM: String, tokenURI: String, createdAt: Date,
        revokedAt: Date? = nil
    ) {
        self.projectID = projectID
        self.keyID = keyID
        self.clientEmail = clientEmail
        self.publicKeyPEM = publicKeyPEM
        self.tokenURI = tokenURI
        self.createdAt = createdAt
        self.revokedAt = revokedAt
    }
}

/// Storage of service accounts.
public protocol ServiceAccountStore: Sendable {
    func insert(_ account: ServiceAccount) async throws
    /// The account, revoked or not.
    func account(keyID: String) async throws -> ServiceAccount?
    func account(clientEmail: String) async throws -> ServiceAccount?
    /// The project's accounts, oldest first, revoked ones included.
    func accounts(projectID: String) async throws -> [ServiceAccount]
    /// Marks the account revoked at `at`; false when there is no such account or it was revoked already.
    func revoke(keyID: String, at: Date) async throws -> Bool
}

/// An access token handed out for a verified assertion: a project-scoped server credential.
public struct AccessToken: Sendable, Equatable {
    public let token: String
    public let expiresIn: Int
}

/// Admin SDKs with a service account, unchanged: they load a service-account JSON file and exchange a signed
/// assertion for an access token at its `token_uri` (OAuth 2.0 JWT bearer, RFC 7523, RS256). The registry keeps only
/// the public key; access tokens are stateless (HMAC-signed project and expiry), so every replica accepts them.
public struct ServiceAccountService: Sendable {
    /// The audience google-auth always puts in the assertion, whatever the file's `token_uri`.
    public static let googleTokenAudience = "https://oauth2.googleapis.com/token"
    public static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    /// Access tokens last an hour, as Google's do.
    public static let accessTokenLifetime = 3600
    static let tokenPrefix = "trat1."

    let store: any ServiceAccountStore
    let clock: any WallClock
    let tokenKey: [UInt8]
    /// Whether each account seen lately is still in force, for at most ``revocationBound`` seconds (a revoked
    /// account's tokens stop within that bound on every replica, as a revoked server key's do).
    private let active = TTLCache<String, Bool>(capacity: 10_000)
    public static let revocationBound: Double = 30

    public init(store: any ServiceAccountStore, clock: any WallClock, tokenKey: [UInt8]) {
        self.store = store
        self.clock = clock
        self.tokenKey = tokenKey
    }

    /// The project's service accounts, revoked ones included.
    public func list(projectID: String) async throws -> [ServiceAccount] {
        try await store.accounts(projectID: projectID)
    }

    /// The account with this key id, revoked or not.
    public func account(keyID: String) async throws -> ServiceAccount? {
        guard keyID.utf8.count <= 128, Identifiers.isPlainText(keyID) else { return nil }
        return try await store.account(keyID: keyID)
    }

    /// Revokes an account: assertions signed with its key are refused at once, its access tokens within
    /// ``revocationBound``. False when there is no such account, or it was revoked already.
    public func revoke(keyID: String) async throws -> Bool {
        guard keyID.utf8.count <= 128, Identifiers.isPlainText(keyID) else { return false }
        let revoked = try await store.revoke(keyID: keyID, at: clock.now())
        active.remove(keyID)
        return revoked
    }

    /// Whether the account is in force, cached for ``revocationBound``.
    private func isActive(keyID: String) async throws -> Bool {
        if let hit = active.lookup(keyID), let inForce = hit { return inForce }
        let account = try await store.account(keyID: keyID)
        let inForce = account != nil && account?.revokedAt == nil
        active.store(keyID, inForce, ttl: ServiceAccountService.revocationBound)
        return inForce
    }

    /// Makes a service account for `project` and returns its credential file (shown once: the private key is not
    /// kept).
    ///
    /// - Parameter baseURL: where clients reach this service; the file's `token_uri` is `<baseURL>/token`.
    public func create(project: Project, baseURL: String) async throws -> JSONValue {
        let base = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        guard base.hasPrefix("http://") || base.hasPrefix("https://"), base.utf8.count <= 512,
            Identifiers.isPlainText(base), !base.contains(" ")
        else { throw RegistryError.invalid("base-url", "must be an http(s) URL such as https://registry.example") }
        let key = try RSAKey.generate()
        let keyID = Hex.encode(try SecureRandom.bytes(20))
        let email = "token-registry-\(keyID.prefix(8))@\(project.id).iam.gserviceaccount.com"
        let tokenURI = base + "/token"
        try await store.insert(
            ServiceAccount(
                projectID: project.id, keyID: keyID, clientEmail: email, publicKeyPEM: try key.publicPEM(),
                tokenURI: tokenURI, createdAt: clock.now()))
        return [
            "type": "service_account", "project_id": .string(project.id), "private_key_id": .string(keyID),
            "private_key": .string(try key.privatePEM()), "client_email": .string(email),
            "client_id": .string(String(UInt64(keyID.prefix(15), radix: 16) ?? 0)),
            "auth_uri": .string(base + "/o/oauth2/auth"), "token_uri": .string(tokenURI),
            "universe_domain": "googleapis.com",
        ]
    }

    static func invalidGrant(_ reason: String) -> RegistryError { RegistryError(.unauthenticated, reason) }

    /// Verifies a JWT-bearer assertion (signature, `iss`, `aud`, `iat`/`exp`) and answers an access token.
    ///
    /// - Throws: `.unauthenticated` with the reason for anything that is not a valid, current assertion of a
    ///   registered service account.
    public func exchange(assertion: String) async throws -> AccessToken {
        guard assertion.utf8.count <= 8192, let parts = JWS.parse(assertion),
            let header = try? JSONParser.parse(parts.header), let claims = try? JSONParser.parse(parts.payload)
        else { throw Self.invalidGrant("the assertion is not a JWT") }
        guard header["alg"]?.stringValue == "RS256" else { throw Self.invalidGrant("the assertion must be RS256") }
        // Both are looked up: text a key could not be (a control character, a NUL the database refuses) is no match,
        // answered as OAuth answers every refused assertion.
        guard let issuer = claims["iss"]?.stringValue, issuer.utf8.count <= 320, Identifiers.isPlainText(issuer) else {
            throw Self.invalidGrant("the assertion has no iss")
        }
        let account: ServiceAccount?
        if let kid = header["kid"]?.stringValue, kid.utf8.count <= 128 {
            account = try await self.account(keyID: kid)
        } else {
            account = try await store.account(clientEmail: issuer)
        }
        guard let account, account.clientEmail == issuer, account.revokedAt == nil else {
            throw Self.invalidGrant("no service account in force matches the assertion's kid and iss")
        }
        guard let key = try? RSAKey(pem: account.publicKeyPEM),
            key.verify(signature: parts.signature, for: parts.signingInput)
        else { throw Self.invalidGrant("the assertion's signature is not valid") }
        let audiences: [String] =
            claims["aud"]?.stringValue.map { [$0] } ?? claims["aud"]?.arrayValue?.compactMap(\.stringValue) ?? []
        guard !audiences.isEmpty, audiences.allSatisfy({ $0 == Self.googleTokenAudience || $0 == account.tokenURI })
        else {
            throw Self.invalidGrant("the assertion's aud must be \(account.tokenURI) or \(Self.googleTokenAudience)")
        }
        if let subject = claims["sub"]?.stringValue, subject != issuer {
            throw Self.invalidGrant("the assertion's sub must be its iss")
        }
        guard let iat = claims["iat"]?.int64Value, let exp = claims["exp"]?.int64Value else {
            throw Self.invalidGrant("the assertion needs iat and exp")
        }
        let now = ClientNumbers.unixSeconds(clock.now())
        guard exp > now else { throw Self.invalidGrant("the assertion has expired") }
        // iat and exp are the client's numbers: compared, never subtracted (ClientNumbers).
        guard iat <= ClientNumbers.adding(now, 60), ClientNumbers.isOrderedSpan(from: iat, to: exp, atMost: 3600),
            exp <= ClientNumbers.adding(now, 3600 + 60)
        else {
            throw Self.invalidGrant("the assertion's exp must be at most one hour after iat, and iat not in the future")
        }
        let expires = ClientNumbers.adding(now, Int64(Self.accessTokenLifetime))
        // The account's key id rides in the token, so revoking the account ends its tokens too.
        let payload = Base64URL.encode(Array("\(account.projectID)|\(expires)|\(account.keyID)".utf8))
        let mac = Base64URL.encode(HMACSHA256.authenticate(Array(payload.utf8), key: tokenKey))
        return AccessToken(token: Self.tokenPrefix + payload + "." + mac, expiresIn: Self.accessTokenLifetime)
    }

    /// The project an access token is for, or nil when it is not one of ours, has expired, or its account was revoked.
    public func project(ofAccessToken token: String) async throws -> String? {
        try await identity(ofAccessToken: token)?.projectID
    }

    /// The project and the account's key id of an access token (``project(ofAccessToken:)``).
    public func identity(ofAccessToken token: String) async throws -> (projectID: String, keyID: String)? {
        guard token.hasPrefix(Self.tokenPrefix), token.utf8.count <= 512 else { return nil }
        let parts = token.dropFirst(Self.tokenPrefix.count).split(separator: ".")
        guard parts.count == 2, let mac = Base64URL.decode(parts[1]),
            ConstantTime.equals(mac, HMACSHA256.authenticate(Array(parts[0].utf8), key: tokenKey)),
            let payload = Base64URL.decode(parts[0]), let text = String(validating: payload, as: UTF8.self)
        else { return nil }
        let fields = text.split(separator: "|")
        guard fields.count == 3, let expires = Int64(fields[1]), expires > ClientNumbers.unixSeconds(clock.now()),
            try await isActive(keyID: String(fields[2]))
        else { return nil }
        return (String(fields[0]), String(fields[2]))
    }
}
