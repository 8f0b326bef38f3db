import API
import JSON
import Registry

/// What a test drives, in either tier: the live service over sockets (``TestService``) or the responder in memory
/// (``InProcessService``). Helpers written against it serve both.
public protocol ServiceUnderTest: Sendable {
    var app: Application { get }
    var project: Project { get }
    var serverKey: String { get }
    var web: App { get }
    func request(_ method: String, _ path: String, headers: [String: String], body: [UInt8]?) async throws -> Reply
    func request(_ method: String, _ path: String, headers: [String: String], json: JSONValue) async throws -> Reply
}

extension TestService: ServiceUnderTest {}
extension InProcessService: ServiceUnderTest {}

extension ServiceUnderTest {
    /// Server-key headers for this service's project.
    public var serverHeaders: [String: String] { ["Authorization": "Bearer \(serverKey)"] }

    /// Creates an installation through the FIS route, as the JS SDK does.
    public func createInstallation(project: Project? = nil, app: App? = nil, fid: String? = nil) async throws
        -> CreatedInstallationReply
    {
        let app = app ?? web
        let reply = try await request(
            "POST", "/v1/projects/\((project ?? self.project).id)/installations", headers: ["x-goog-api-key": app.apiKey],
            json: [
                "fid": fid.map { .string($0) } ?? .string(""), "authVersion": "FIS_v2", "appId": .string(app.id),
                "sdkVersion": "w:0.6.24",
            ])
        guard reply.status == 200, let json = reply.json, let fid = json["fid"]?.stringValue,
            let refresh = json["refreshToken"]?.stringValue, let token = json["authToken"]?["token"]?.stringValue
        else { throw ReplyError(reply: reply) }
        return CreatedInstallationReply(fid: fid, refreshToken: refresh, authToken: token)
    }

    /// `count` new installations, each with a registration token reported by the backend (`<prefix>-<n>-<fid>`).
    public func registered(count: Int, prefix: String = "tok") async throws -> [(fid: String, token: String)] {
        var out: [(String, String)] = []
        for n in 0..<count {
            let i = try await createInstallation()
            let token = "\(prefix)-\(n)-\(i.fid)"
            let r = try await request(
                "PUT", "/v1/projects/\(project.id)/installations/\(i.fid)/registration", headers: serverHeaders,
                json: ["token": .string(token), "platform": "android"])
            guard r.status == 200 else { throw ReplyError(reply: r) }
            out.append((i.fid, token))
        }
        return out
    }
}

/// What both test services are seeded with: a project, a web, iOS and Android app, and a web app whose installations
/// start opted out of messaging.
struct SeededProject {
    let project: Project
    let serverKey: String
    let web: App
    let ios: App
    let android: App
    let consentFirst: App

    static func make(on catalog: Catalog, id: String, number: Int64) async throws -> SeededProject {
        let key = try await catalog.createProject(id: id, number: number)
        let project = Project(id: id, number: number)
        func app(_ platform: Platform, _ bundle: String?, optedIn: Bool = true) async throws -> App {
            try await catalog.createApp(project: project, platform: platform, bundleID: bundle, autoInitDefault: optedIn)
        }
        return SeededProject(
            project: project, serverKey: key, web: try await app(.web, nil), ios: try await app(.ios, "com.example.app"),
            android: try await app(.android, "com.example.app"), consentFirst: try await app(.web, nil, optedIn: false))
    }
}
