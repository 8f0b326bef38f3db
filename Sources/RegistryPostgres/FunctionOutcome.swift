import Postgres
import Registry

/// The SQL-to-Swift contract of the store functions (`registry_register`, `registry_refresh_token`,
/// `registry_subscribe`): each answers an `outcome` text, which is decoded here once into the function's own enum.
/// An answer outside it is a store error naming the function, never a string compared at a call site.
protocol FunctionOutcome: RawRepresentable where RawValue == String {
    /// The function whose `outcome` this is.
    static var function: String { get }
}

extension FunctionOutcome {
    /// The `outcome` column of `row`.
    init(_ row: PostgresRow) throws {
        let text: String = try row.require("outcome")
        guard let outcome = Self(rawValue: text) else {
            throw RegistryError(.internal, "\(Self.function) answered \(text.prefix(32))")
        }
        self = outcome
    }
}

/// `registry_register` (migration 13).
enum RegisterOutcome: String, FunctionOutcome {
    static let function = "registry_register"
    case notFound = "not_found"
    case consentOff = "consent_off"
    case written
}

/// `registry_refresh_token` (migration 19).
enum RefreshTokenOutcome: String, FunctionOutcome, CaseIterable {
    static let function = "registry_refresh_token"
    case notFound = "not_found"
    case ahead
    case consentOff = "consent_off"
    case older
    case written

    /// Every outcome's name, in `allCases` order: the keys of the audit outcome table (migration 26).
    static let names = TextArray(allCases.map(\.rawValue))

    var kind: RegistrationWrite.Kind {
        switch self {
        case .notFound: return .installationNotFound
        case .ahead: return .clientTimeAhead
        case .consentOff: return .consentOff
        case .older, .written: return .stored
        }
    }
}

/// `registry_subscribe` (migration 14).
enum SubscribeOutcome: String, FunctionOutcome {
    static let function = "registry_subscribe"
    case added
    case alreadyExists = "already_exists"
    case notFound = "not_found"
    case noConsent = "no_consent"
    case tooManyTopics = "too_many_topics"

    var result: SubscribeResult {
        switch self {
        case .added: return .added
        case .alreadyExists: return .alreadyExists
        case .notFound: return .notFound
        case .noConsent: return .noConsent
        case .tooManyTopics: return .tooManyTopics
        }
    }
}
