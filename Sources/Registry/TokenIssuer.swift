import Crypto
import Foundation
import JSON
import Synchronization

/// What a verified installation auth token says.
public struct AuthClaims: Sendable, Equatable {
    public let appID: String
    public let fid: String
    public let projectNumber: Int64
    public let expires: Date
}

/// A minted auth token and its lifetime in seconds.
public struct AuthToken: Sendable {
    public let token: String
    public let expiresIn: Int
}

/// A stored signing key: its `kid`, its private key in PEM, when it was made.
public struct StoredSigningKey: Sendable {
    public let kid: String
    public let privatePEM: String
    public let createdAt: Date
    /// When set, the key neither signs nor verifies any more.
    public let retiredAt: Date?

    public init(kid: String, privatePEM: String, createdAt: Date, retiredAt: Date? = nil) {
        self.kid = kid
        self.privatePEM = privatePEM
        self.createdAt = createdAt
        self.retiredAt = retiredAt
    }
}

/// Storage of the auth-token signing keys, shared by every replica.
public protocol SigningKeyStore: Sendable {
    /// Every key, oldest first, retired ones included.
    func all() async throws -> [StoredSigningKey]
    func insert(_ key: StoredSigningKey) async throws
    /// Inserts `key` only when there is no key in service (replicas starting together race here; one wins).
    func insertFirst(_ key: StoredSigningKey) async throws
    /// Retires a key; false when there is no such key in service.
    func retire(kid: String, at: Date) async throws -> Bool
}

/// Mints and verifies installation auth tokens: ES256 JWTs with `kid`, claims `appId`, `exp`, `fid`,
/// `projectNumber` (a number) and `iat`, as real FIS tokens carry.
///
/// Keys live in the ``SigningKeyStore``; the newest signs and every stored key verifies, so tokens signed before a
/// `keys rotate` keep working until they expire. Each replica reloads the ring every minute and whenever it
/// meets an unknown `kid`, so keys rotated by another process are picked up.
public final class TokenIssuer: Sendable {
    public static let lifetime = 604_800

    private struct Key: Sendable {
        let kid: String
        let privateKey: ES256PrivateKey
        let created: Date
    }

    /// The loaded ring. Minting and verifying read it under a lock and sign outside it, so concurrent requests
    /// sign in parallel. Two replicas or tasks reloading at once is harmless: loading is idempotent.
    private struct Ring: Sendable {
        var keys: [String: Key] = [:]
        var signing: Key?
        /// Monotonic: reload timing is not domain time.
        var loadedAt: ContinuousClock.Instant?

        func isOlder(than age: Duration) -> Bool { loadedAt.map { ContinuousClock.now - $0 > age } ?? true }
    }

    private let store: any SigningKeyStore
    private let clock: any WallClock
    private let ring = Mutex(Ring())
    /// The reload under way for requests that found the ring stale or met an unknown `kid`: they wait for it
    /// together, one load however many ask (a burst of tokens with random `kid`s each loaded and parsed every key).
    private let sharedReload = Mutex<Task<Void, any Error>?>(nil)
    /// Tokens whose signature was verified, with their claims and the key that signed them. The SDKs present the
    /// same token for hours, and an ES256 verification was a fifth of a consent change's CPU; a hit is checked for
    /// expiry and for its key still being in the ring, so a retired key's tokens stop at once.
    private let verified = Mutex<[String: (claims: AuthClaims, kid: String)]>([:])
    static let verifiedLimit = 10_000

    public init(store: any SigningKeyStore, clock: any WallClock) {
        self.store = store
        self.clock = clock
    }

    /// Adds a new signing key and makes it current.
    ///
    /// - Returns: its `kid` (the RFC 7638 thumbprint of its public key).
    @discardableResult
    public func rotate() async throws -> String {
        let key = try ES256PrivateKey.generate()
        let kid = key.publicKey.thumbprint
        try await store.insert(
            StoredSigningKey(kid: kid, privatePEM: try key.pemRepresentation(), createdAt: clock.now()))
        try await reload()
        return kid
    }

    /// Retires a key: from now on (within a minute on other replicas) it neither signs nor verifies; tokens it
    /// signed stop working. When it was the signing key, the newest remaining one signs, or a new one is made.
    ///
    /// - Returns: false when no key of that `kid` is in service.
    @discardableResult
    public func retire(kid: String) async throws -> Bool {
        guard try await store.retire(kid: kid, at: clock.now()) else { return false }
        try await reload()
        return true
    }

    /// Loads the ring of keys in service, creating one when there is none.
    public func reload() async throws {
        var stored = try await store.all().filter { $0.retiredAt == nil }
        if stored.isEmpty {
            let key = try ES256PrivateKey.generate()
            try await store.insertFirst(
                StoredSigningKey(
                    kid: key.publicKey.thumbprint, privatePEM: try key.pemRepresentation(), createdAt: clock.now()))
            stored = try await store.all().filter { $0.retiredAt == nil }
        }
        var loaded: [String: Key] = [:]
        var newest: Key?
        for entry in stored {
            let key = Key(
                kid: entry.kid, privateKey: try ES256PrivateKey(pem: entry.privatePEM), created: entry.createdAt)
            loaded[entry.kid] = key
            newest = key
        }
        ring.withLock { $0 = Ring(keys: loaded, signing: newest, loadedAt: .now) }
    }

    /// ``reload()`` for requests: joins the one under way, if any.
    private func reloadOnce() async throws {
        let load = sharedReload.withLock { running -> Task<Void, any Error> in
            if let running { return running }
            let task = Task { try await self.reload() }
            running = task
            return task
        }
        defer { sharedReload.withLock { if $0 == load { $0 = nil } } }
        try await load.value
    }

    private func currentRing() async throws -> Ring {
        let current = ring.withLock { $0 }
        if current.signing == nil || current.isOlder(than: .seconds(60)) {
            try await reloadOnce()
            return ring.withLock { $0 }
        }
        return current
    }

    /// Mints a token for an installation.
    public func mint(appID: String, fid: String, projectNumber: Int64) async throws -> AuthToken {
        guard let signing = try await currentRing().signing else { throw CryptoError(.invalidKey, "no signing key") }
        let now = Int64(clock.now().timeIntervalSince1970)
        let header: JSONValue = ["alg": "ES256", "kid": .string(signing.kid), "typ": "JWT"]
        let claims: JSONValue = [
            "appId": .string(appID), "exp": .int(now + Int64(TokenIssuer.lifetime)), "fid": .string(fid),
            "projectNumber": .int(projectNumber), "iat": .int(now),
        ]
        let token = try JWS.sign(header: header.encoded(), payload: claims.encoded(), key: signing.privateKey)
        return AuthToken(token: token, expiresIn: TokenIssuer.lifetime)
    }

    /// Verifies signature and expiry.
    ///
    /// - Throws: ``RegistryError`` `.unauthenticated` for anything that is not a valid, current token of ours.
    public func verify(_ token: String) async throws -> AuthClaims {
        let invalid = RegistryError(.unauthenticated, "the installation auth token is invalid or expired")
        guard token.utf8.count <= 4096 else { throw invalid }
        var current = try await currentRing()
        // A token verified before needs no parsing either: only its expiry and its key's place in the ring.
        if let hit = verified.withLock({ $0[token] }), current.keys[hit.kid] != nil {
            guard hit.claims.expires > clock.now() else { throw invalid }
            return hit.claims
        }
        guard let parts = JWS.parse(token), let header = try? JSONParser.parse(parts.header),
            header["alg"]?.stringValue == "ES256", let kid = header["kid"]?.stringValue
        else { throw invalid }
        if current.keys[kid] == nil, current.isOlder(than: .seconds(5)) {
            try await reloadOnce()
            current = ring.withLock { $0 }
        }
        guard let key = current.keys[kid] else {
            // A well-formed token under a key this service never had: Google's, on a device that moved here with it.
            // No SDK renews its token on a 401, so the answer says what the app must do (docs/clients.md).
            throw RegistryError(
                .unauthenticated,
                "the installation auth token was not issued by this service; force a refresh (getToken(true))")
        }
        guard key.privateKey.publicKey.verify(signature: parts.signature, for: parts.signingInput),
            let claims = try? JSONParser.parse(parts.payload),
            let appID = claims["appId"]?.stringValue, let fid = claims["fid"]?.stringValue,
            let number = claims["projectNumber"]?.int64Value, let exp = claims["exp"]?.int64Value,
            let iat = claims["iat"]?.int64Value,
            // However it was signed, no token of ours lives longer than the lifetime we issue.
            ClientNumbers.isOrderedSpan(from: iat, to: exp, atMost: Int64(TokenIssuer.lifetime))
        else { throw invalid }
        let expires = Date(timeIntervalSince1970: TimeInterval(exp))
        guard expires > clock.now() else { throw invalid }
        let verifiedClaims = AuthClaims(appID: appID, fid: fid, projectNumber: number, expires: expires)
        verified.withLock { cache in
            // Bounded: when full, start again (the tokens in use come back at their next request).
            if cache.count >= Self.verifiedLimit { cache.removeAll(keepingCapacity: true) }
            cache[token] = (verifiedClaims, kid)
        }
        return verifiedClaims
    }

    /// The public keys as a JWK Set document.
    public func jwks() async throws -> String {
        let entries = try await currentRing().keys.values.sorted { $0.created < $1.created }.map {
            $0.privateKey.publicKey.jwkJSON(kid: $0.kid)
        }
        return "{\"keys\":[" + entries.joined(separator: ",") + "]}"
    }
}
