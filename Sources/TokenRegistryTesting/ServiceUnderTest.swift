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
