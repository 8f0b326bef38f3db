import Registry

/// A resolver that answers from a table, for tests that must not depend on DNS (and never leave the machine).
public struct StaticResolver: HostResolver {
    public let table: [String: [IPAddress]]

    public init(_ table: [String: [IPAddress]] = [:]) { self.table = table }

    public func resolve(_ host: String, for owner: String) async throws -> [IPAddress] {
        guard let addresses = table[host.lowercased()] else { throw RegistryError(.notFound, "no such host") }
        return addresses
    }
}
