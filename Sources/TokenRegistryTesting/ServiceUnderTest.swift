import API
import JSON
import Registry

/// What a test drives, in either tier: the live service over sockets (``TestService``) or the responder in memory
/// (``InProcessService``). Helpers written against it serve both.
public protocol ServiceUnderTest: Sendable {
    var app: Application { get }
    var project: Project { get }
    var serverHeaders: [String: String] { get }
    func request(_ method: String, _ path: String, headers: [String: String], body: [UInt8]?) async throws -> Reply
    func request(_ method: String, _ path: String, headers: [String: String], json: JSONValue) async throws -> Reply
    func createInstallation(project: Project?, app: App?, fid: String?) async throws -> CreatedInstallationReply
}

extension TestService: ServiceUnderTest {}
extension InProcessService: ServiceUnderTest {}

extension ServiceUnderTest {
    /// `count` new installations, each with a registration token reported by the backend (`<prefix>-<n>-<fid>`).
    public func registered(count: Int, prefix: String = "tok") async throws -> [(fid: String, token: String)] {
        var out: [(String, String)] = []
        for n in 0..<count {
            let i = try await createInstallation(project: nil, app: nil, fid: nil)
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
