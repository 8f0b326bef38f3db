import Registry
import Synchronization

/// A delivery transport that answers each endpoint from its own script (then 200) and records what it was sent.
/// Scripts are per endpoint because a delivery run posts to several endpoints concurrently.
public final class ScriptedTransport: DeliveryTransport {
    public typealias Sent = (endpoint: String, body: [UInt8], headers: [(String, String)])
    public init() {}

    private let state = Mutex<(scripts: [String: [DeliveryResponse]], sent: [Sent])>(([:], []))

    public func answer(_ endpoint: String, _ responses: DeliveryResponse...) {
        state.withLock { $0.scripts[endpoint, default: []] += responses }
    }

    public var sent: [Sent] { state.withLock { $0.sent } }

    public func post(endpoint: String, body: [UInt8], headers: [(String, String)], project: String) async
        -> DeliveryResponse
    {
        state.withLock { s in
            s.sent.append((endpoint, body, headers))
            guard let next = s.scripts[endpoint]?.first else { return .status(200) }
            s.scripts[endpoint]?.removeFirst()
            return next
        }
    }
}
