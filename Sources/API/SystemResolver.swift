import Dispatch
import Glibc
import Registry
import Synchronization

/// The system's resolver (`getaddrinfo`), each look-up on a queue (a thread) of its own, admitted by
/// ``LookUpSlots``: at most 16 look-ups at once in the process and 4 for one project. `getaddrinfo` blocks its thread
/// for as long as the name's servers take: a caller adding linked services whose names answer slowly could otherwise
/// start a thread a name, and with one bound for all, one project's slow names held every slot and every other
/// project's deliveries failed their look-ups (docs/security.md, class 14). Beyond either bound a look-up fails at
/// once, as one that timed out would: adding a service then goes on without the early check (each delivery checks the
/// address it connects to), and a delivery is retried later.
public struct SystemResolver: HostResolver {
    let slots: LookUpSlots
    let lookUp: @Sendable (String) throws -> [IPAddress]

    /// `slots` and `lookUp` are the process's and `getaddrinfo`, but for tests.
    public init(
        slots: LookUpSlots = .shared, lookUp: @escaping @Sendable (String) throws -> [IPAddress] = SystemResolver.system
    ) {
        self.slots = slots
        self.lookUp = lookUp
    }

    public func resolve(_ host: String, for owner: String) async throws -> [IPAddress] {
        guard slots.admit(owner) else {
            throw RegistryError(.unavailable, "too many name look-ups under way; retry later")
        }
        let lookUp = self.lookUp
        let slots = self.slots
        return try await withCheckedThrowingContinuation { continuation in
            // A queue of its own, not the global one: getaddrinfo blocks for as long as the resolver takes, and blocked
            // global-queue threads delay every Task.sleep of the process (docs/security.md, class 16).
            DispatchQueue(label: "delivery.resolve").async {
                defer { slots.release(owner) }
                continuation.resume(with: Result { try lookUp(host) })
            }
        }
    }

    /// `getaddrinfo`: the host's addresses, each once, in the resolver's order.
    @Sendable public static func system(_ host: String) throws -> [IPAddress] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0, let first = list else {
            throw RegistryError(.notFound, "the name does not resolve")
        }
        defer { freeaddrinfo(first) }
        var addresses: [IPAddress] = []
        var node: UnsafeMutablePointer<addrinfo>? = first
        while let entry = node {
            if let address = Sockaddr.ip(entry.pointee.ai_addr), !addresses.contains(address) {
                addresses.append(address)
            }
            node = entry.pointee.ai_next
        }
        return addresses
    }
}

/// Name look-ups under way: at most `total` at once, and at most `perOwner` for one owner (a project).
public final class LookUpSlots: Sendable {
    /// The process's: 16 at once, and for one project as many as its deliveries in flight
    /// (``DeletionPolicy/deliveriesPerProject``, 4), which start together: with fewer, a project's own notices were
    /// refused their look-ups and recorded as failed ones.
    public static let shared = LookUpSlots(total: 16, perOwner: DeletionPolicy().deliveriesPerProject)

    public let total: Int
    public let perOwner: Int
    private let state = Mutex<(total: Int, byOwner: [String: Int])>((0, [:]))

    public init(total: Int, perOwner: Int) {
        self.total = total
        self.perOwner = perOwner
    }

    /// Look-ups under way now.
    public var inUse: Int { state.withLock { $0.total } }

    /// Takes a slot for `owner`; false when the process's or the owner's are all taken.
    func admit(_ owner: String) -> Bool {
        state.withLock { s in
            guard s.total < total, s.byOwner[owner, default: 0] < perOwner else { return false }
            s.total += 1
            s.byOwner[owner, default: 0] += 1
            return true
        }
    }

    func release(_ owner: String) {
        state.withLock { s in
            s.total -= 1
            let left = s.byOwner[owner, default: 1] - 1
            s.byOwner[owner] = left > 0 ? left : nil
        }
    }
}
