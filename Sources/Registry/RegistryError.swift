/// A rule the request broke, or a store that could not serve it, in terms the API maps to a status once, in one
/// place. Stores translate their own failures (a database error, a lost connection) into these at their edge.
public struct RegistryError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        public static let invalidArgument = Kind("invalidArgument")
        public static let unauthenticated = Kind("unauthenticated")
        public static let permissionDenied = Kind("permissionDenied")
        public static let notFound = Kind("notFound")
        public static let alreadyExists = Kind("alreadyExists")
        /// The request is valid but the resource is not in a state that allows it (e.g. consent withdrawn).
        public static let failedPrecondition = Kind("failedPrecondition")
        /// A quota of the caller's is used up (linked services of a project, requests of an address).
        public static let resourceExhausted = Kind("resourceExhausted")
        /// A concurrent change got in the way (serialization failure, deadlock); retrying may succeed.
        public static let aborted = Kind("aborted")
        /// The store cannot be reached now (database down, pool exhausted); retry later.
        public static let unavailable = Kind("unavailable")
        /// A store failed in a way the caller cannot fix (a bug, a corrupt row).
        public static let `internal` = Kind("internal")
        public var description: String { name }
    }

    public let kind: Kind
    public let message: String
    /// The request field at fault, when one is.
    public let field: String?
    /// The store was reached but this statement could not finish: it waited too long for a lock or for its time-out,
    /// or a concurrent change got in the way (``unavailable`` to a client, as its retry may succeed). A job tells it
    /// apart from a database it cannot reach: the one record failed, not the run.
    public var contended = false

    public init(_ kind: Kind, _ message: String, field: String? = nil) {
        self.kind = kind
        self.message = message
        self.field = field
    }

    /// ``Kind/unavailable``, ``contended``.
    public static func contended(_ message: String) -> RegistryError {
        var error = RegistryError(.unavailable, message)
        error.contended = true
        return error
    }

    public static func invalid(_ field: String, _ message: String) -> RegistryError {
        RegistryError(.invalidArgument, "\(field): \(message)", field: field)
    }

    public var description: String { "\(kind): \(message)" }
}
