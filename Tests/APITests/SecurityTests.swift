import Crypto
import Foundation
import HTTP
import JSON
import Postgres
import Registry
import Synchronization
import Testing
import TokenRegistryTesting

@testable import API
@testable import RegistryPostgres

/// What an attacker or a careless operator could do, and no longer can (docs/security.md).

/// Everything the service logs, kept in memory.
final class LogCapture: Sendable {
    let lines = Mutex<[String]>([])
    var text: String { lines.withLock { $0.joined() } }
    var logger: Logger {
        Logger(level: .debug) { [self] bytes in lines.withLock { $0.append(String(decoding: bytes, as: UTF8.self)) } }
    }
}

@Suite("No secret in the logs", .enabled(if: TestDatabase.isAvailable))
struct LogSecrecyTests {
    @Test func aFullFlowAtDebugLogsNoneOfTheSecretsItMinted() async throws {
        let capture = LogCapture()
        var secrets: [String] = []
        try await TestService.with(logger: capture.logger) { s in
            secrets.append(s.serverKey)
            let i = try await s.createInstallation()
            secrets += [i.refreshToken, i.authToken]
            let fis = ["x-goog-firebase-installations-auth": "FIS \(i.authToken)"]
            let registered = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/registrations", headers: fis, json: Bodies.webRegistration)
            let token = try #require(registered.json?["token"]?.stringValue)
            secrets.append(token)
            _ = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/registrations/\(token)/topicSubscriptions?topicName=news",
                headers: s.serverHeaders, json: [:])
            _ = try await s.request(
                "GET", "/v1/projects/\(s.project.id)/registrations/\(token):sendability", headers: s.serverHeaders)
            let linked = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/linkedServices", headers: s.serverHeaders,
                json: ["name": "crm", "endpoint": "https://crm.example/hook"])
            secrets.append(try #require(linked.json?["secret"]?.stringValue))
            let refresh = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(i.fid)/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(i.refreshToken)", "x-goog-api-key": s.web.apiKey])
            secrets.append(try #require(refresh.json?["token"]?.stringValue))
            // Failures too: bad credentials, a bad token in a path, a 404.
            _ = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/installations/\(i.fid)/authTokens:generate",
                headers: ["Authorization": "FIS_v2 \(i.refreshToken)x"])
            _ = try await s.request("GET", "/iid/info/\(token)x", headers: s.serverHeaders)
            _ = try await s.request(
                "DELETE", "/v1/project/\(s.project.id)/instanceId/\(i.fid)", headers: s.serverHeaders)
        }
        let log = capture.text
        #expect(log.contains("\"msg\":\"request\""), "the flow was logged at all")
        for secret in secrets { #expect(!log.contains(secret), "a secret appeared in the log: \(secret.prefix(8))…") }
    }
}

@Suite("Database errors at the store's edge")
struct DatabaseErrorRedactionTests {
    /// Every transient failure (class 40, transaction rollback: serialization failures, deadlocks; a lock not
    /// available) answers what every client retries: 503 with Retry-After, never the 409 that Android's FIS client
    /// and the admin SDKs read as final.
    @Test(arguments: ["40000", "40001", "40002", "40003", "40P01", "55P03"])
    func transientFailuresAnswerARetryableStatus(_ state: String) {
        let translated = Database.translate(PostgresError(.server, sqlState: state, message: "ERROR:  conflict"))
        #expect(translated.kind == .unavailable)
        let answer = APIError.from(translated)
        #expect(answer.status == 503 && answer.headers.contains { $0.0 == "retry-after" })
    }

    /// A write whose installation was deleted by a transaction that committed meanwhile (its foreign key refused) is
    /// answered as the installation being gone: 404, never a 500.
    @Test func aWriteRacingItsReferencesDeletionIsNotFound() {
        let translated = Database.translate(
            PostgresError(
                .server, sqlState: "23503",
                message: #"ERROR:  insert or update on table "checkins" violates foreign key constraint "checkins_fk""#))
        #expect(translated.kind == .notFound)
        #expect(APIError.from(translated).status == 404)
        // A delete refused because rows still refer to what it deletes is a fault of ours, not the caller's.
        let refused = Database.translate(
            PostgresError(
                .server, sqlState: "23503",
                message: #"ERROR:  update or delete on table "apps" violates foreign key constraint "x" on table "y""#))
        #expect(refused.kind == .internal)
    }

    @Test func detailLinesNeverLeaveTheStore() {
        let error = PostgresError(
            .server, sqlState: "23505",
            message: "ERROR:  duplicate key value violates unique constraint \"registrations_token\"\n"
                + "DETAIL:  Key (project_id, token)=(demo-proj, dIsVQ2QVRT:APA91b-secret-token) already exists.")
        let translated = Database.translate(error)
        #expect(!translated.description.contains("secret-token"))
        let other = Database.translate(
            PostgresError(
                .server, sqlState: "XX000", message: "ERROR:  boom\nDETAIL:  Key (token)=(another-secret) is bad"))
        #expect(other.kind == .internal && !other.description.contains("another-secret"))
        #expect(other.description.contains("boom"))
    }
}

@Suite("Secrets at rest, keys that end", .enabled(if: TestDatabase.isAvailable))
struct SecretsAtRestTests {
    @Test func noSecretIsStoredInClear() async throws {
        try await TestService.with { s in
            let i = try await s.createInstallation()
            let linked = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/linkedServices", headers: s.serverHeaders,
                json: ["name": "crm", "endpoint": "https://crm.example/hook"])
            let secret = try #require(linked.json?["secret"]?.stringValue)
            _ = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/linkedServices/crm:rotateSecret", headers: s.serverHeaders)
            func count(_ sql: String) async throws -> Int {
                try await s.pool.query(PostgresQuery(unsafeSQL: sql)).first?.require("n") ?? -1
            }
            #expect(try await count("SELECT count(*) AS n FROM signing_keys WHERE private_pem NOT LIKE 'enc1:%'") == 0)
            #expect(try await count("SELECT count(*) AS n FROM signing_keys") >= 1)
            #expect(
                try await count(
                    "SELECT count(*) AS n FROM server_secrets WHERE convert_from(secret, 'UTF8') NOT LIKE 'enc1:%'")
                    == 0)
            #expect(
                try await count(
                    "SELECT count(*) AS n FROM linked_services WHERE secret NOT LIKE 'enc1:%' OR previous_secret NOT LIKE 'enc1:%'"
                )
                    == 0)
            // Nothing minted appears anywhere in those tables' text.
            for minted in [secret, i.refreshToken, s.serverKey] {
                let hits = try await s.pool.query(
                    """
                    SELECT (SELECT count(*) FROM linked_services l WHERE l::text LIKE '%' || \(minted) || '%')
                         + (SELECT count(*) FROM installations n WHERE n::text LIKE '%' || \(minted) || '%')
                         + (SELECT count(*) FROM server_keys k WHERE k::text LIKE '%' || \(minted) || '%') AS n
                    """)
                #expect(try hits.first?.require("n", as: Int.self) == 0)
            }
        }
    }

    @Test func anotherMasterKeyIsRefusedAndLeftoversInClearAreSealed() async throws {
        try await TestService.with { s in
            let other = try SecretBox(key: try SecureRandom.bytes(32))
            await #expect(throws: RegistryError.self) { try await PostgresRegistry.prepare(pool: s.pool, box: other) }
            // A secret an older version stored in clear is sealed at the next start, and still works.
            _ = try await s.request(
                "POST", "/v1/projects/\(s.project.id)/linkedServices", headers: s.serverHeaders,
                json: ["name": "legacy", "endpoint": "https://legacy.example/hook"])
            try await s.pool.query(
                "UPDATE linked_services SET secret = 'whsec_from_an_old_version' WHERE name = 'legacy'")
            #expect(try await PostgresRegistry.prepare(pool: s.pool, box: s.box) == 1)
            let stored: String? = try await s.pool.query("SELECT secret FROM linked_services WHERE name = 'legacy'")
                .first?
                .require("secret")
            #expect(stored?.hasPrefix("enc1:") == true)
            // The sealed leftover still signs: the service can replace it with a secret of its own.
            let rotation = LinkedServiceRequest.rotation(
                project: s.project.id, service: "legacy", secret: "whsec_from_an_old_version")
            let ack = try await s.request("POST", rotation.path, headers: rotation.headers, body: rotation.body)
            #expect(ack.status == 200, "\(ack)")
        }
    }

    /// A token signed by the current key, with the claims given.
    static func forge(_ s: TestService, fid: String, iat: Int64, exp: Int64) async throws -> String {
        let row = try #require(
            try await s.pool.query(
                "SELECT kid, private_pem FROM signing_keys WHERE retired_at IS NULL ORDER BY created_at DESC LIMIT 1"
            ).first)
        let kid: String = try row.require("kid")
        let pem = try s.box.openString(try row.require("private_pem"), context: "signing_keys:" + kid)
        let header: JSONValue = ["alg": "ES256", "kid": .string(kid), "typ": "JWT"]
        let claims: JSONValue = [
            "appId": .string(s.web.id), "exp": .int(exp), "fid": .string(fid),
            "projectNumber": .int(s.project.number), "iat": .int(iat),
        ]
        return try JWS.sign(header: header.encoded(), payload: claims.encoded(), key: try ES256PrivateKey(pem: pem))
    }

    @Test func tokensLivingLongerThanSevenDaysAreRefused() async throws {
        try await TestService.with { s in
            let i = try await s.createInstallation()
            let now = Int64(Date().timeIntervalSince1970)
            let consent = "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent"
            let week = try await Self.forge(s, fid: i.fid, iat: now, exp: now + 604_800)
            #expect(
                try await s.request("GET", consent, headers: ["x-goog-firebase-installations-auth": week]).status == 200
            )
            let longer = try await Self.forge(s, fid: i.fid, iat: now, exp: now + 604_801)
            #expect(
                try await s.request("GET", consent, headers: ["x-goog-firebase-installations-auth": longer]).status
                    == 401)
            let noIssueTime = try await Self.forge(s, fid: i.fid, iat: 0, exp: now + 60)
            #expect(
                try await s.request("GET", consent, headers: ["x-goog-firebase-installations-auth": noIssueTime]).status
                    == 401)
        }
    }

    /// A token verified once is remembered, but never past its expiry.
    @Test func aRememberedTokenStillExpires() async throws {
        let clock = ManualClock(Date())
        try await TestService.with(clock: clock) { s in
            let i = try await s.createInstallation()
            let consent = "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent"
            let auth = ["x-goog-firebase-installations-auth": i.authToken]
            #expect(try await s.request("GET", consent, headers: auth).status == 200)
            clock.advance(by: TimeInterval(TokenIssuer.lifetime) - 60)
            #expect(try await s.request("GET", consent, headers: auth).status == 200)
            clock.advance(by: 120)
            #expect(try await s.request("GET", consent, headers: auth).status == 401)
        }
    }

    @Test func aRetiredSigningKeyStopsVerifying() async throws {
        try await TestService.with { s in
            let i = try await s.createInstallation()
            let consent = "/v1/projects/\(s.project.id)/installations/\(i.fid)/consent"
            let oldKid = try #require(
                JWS.parse(i.authToken).flatMap { try? JSONParser.parse($0.header) }?["kid"]?.stringValue)
            // Used once first: the token's verification is remembered, and retiring its key must end that too.
            #expect(
                try await s.request("GET", consent, headers: ["x-goog-firebase-installations-auth": i.authToken]).status
                    == 200)
            _ = try await s.app.tokens.rotate()
            #expect(try await s.app.tokens.retire(kid: oldKid))
            #expect(
                try await s.request("GET", consent, headers: ["x-goog-firebase-installations-auth": i.authToken]).status
                    == 401)
            #expect(!(try await s.request("GET", "/.well-known/jwks.json").text.contains(oldKid)))
            let fresh = try await s.createInstallation()
            #expect(
                try await s.request(
                    "GET", "/v1/projects/\(s.project.id)/installations/\(fresh.fid)/consent",
                    headers: ["x-goog-firebase-installations-auth": fresh.authToken]
                ).status == 200)
            #expect(!(try await s.app.tokens.retire(kid: oldKid)))
        }
    }

    @Test func serverKeysRotateWithAnOverlapAndCanBeRevoked() async throws {
        try await TestService.with { s in
            let linked = "/v1/projects/\(s.project.id)/linkedServices"
            let now = Date()
            let second = try await s.app.catalog.rotateServerKey(project: s.project, keepOldFor: 3600, at: now)
            #expect(try await s.request("GET", linked, headers: ["Authorization": "Bearer \(second)"]).status == 200)
            #expect(try await s.request("GET", linked, headers: s.serverHeaders).status == 200)  // the overlap
            let later = now.addingTimeInterval(1)
            let third = try await s.app.catalog.rotateServerKey(project: s.project, keepOldFor: 0, at: later)
            #expect(try await s.app.catalog.revokeServerKeys(project: s.project, all: false, at: later) == 0)
            let other = try await s.addProject(id: "other-proj", number: 99_999)
            // A key that was never used here (so not cached) is refused at once once expired.
            _ = try await s.app.catalog.rotateServerKey(project: other.project, keepOldFor: 0, at: Date())
            let refused = try await s.request(
                "GET", "/v1/projects/other-proj/linkedServices", headers: ["Authorization": "Bearer \(other.serverKey)"]
            )
            #expect(refused.status == 401)
            #expect(try await s.request("GET", linked, headers: ["Authorization": "Bearer \(third)"]).status == 200)
            #expect(try await s.app.catalog.revokeServerKeys(project: s.project, all: true, at: later + 1) == 1)
        }
    }
}
