import Crypto

/// Registration tokens: what the service hands out and what app backends send back.
public enum RegistrationToken {
    /// A new registration token: the FID, a colon and 512 random bits (iOS treats tokens that do not start with
    /// the current FID as stale).
    public static func new(fid: String) throws -> String {
        fid + ":APA91b" + Base64URL.encode(try SecureRandom.bytes(64))
    }

    /// The longest token taken: 2048 bytes. A token is a key of the unique index on `(project_id, token)`, and a
    /// B-tree entry holds at most 2704 bytes (a third of a page, less its header), so a token must fit uncompressed
    /// beside the longest project ID: at 4096, 3000 random characters reached PostgreSQL and failed there (a 500,
    /// and its group-committed batch run again statement by statement) while 4096 repeated ones compressed and
    /// passed. FCM tokens are about 160 characters, APNs device tokens 64 hex digits.
    public static let maxBytes = 2048

    /// 1–``maxBytes`` characters of `[A-Za-z0-9_:.-]`.
    public static func isValid(_ token: String) -> Bool {
        guard (1...maxBytes).contains(token.utf8.count) else { return false }
        return token.utf8.allSatisfy { c in
            (65...90).contains(c) || (97...122).contains(c) || (48...57).contains(c) || "_:.-".utf8.contains(c)
        }
    }

    /// The FID part of a `<FID>:<opaque>` token, when it has one.
    public static func fid(of token: String) -> String? {
        let head = String(token.split(separator: ":", maxSplits: 1).first ?? "")
        return Identifiers.isValidFID(head) ? head : nil
    }
}

/// The APNs gateway a device token belongs to.
public enum APNsEnvironment: String, Sendable, CaseIterable {
    case sandbox = "SANDBOX"
    case production = "PROD"
}

/// An APNs device token with its environment.
public struct APNsDevice: Sendable, Equatable {
    /// Lower-case hexadecimal.
    public let token: String
    public let environment: APNsEnvironment?

    /// Checks and normalises a device token: 1–200 hexadecimal characters, stored in lower case.
    ///
    /// - Parameters:
    ///   - tokenField: the request field named when the token is malformed.
    ///   - environmentField: the request field named when the environment is not `SANDBOX` or `PROD`.
    public init(token: String, environment: String?, tokenField: String, environmentField: String) throws {
        guard !token.isEmpty, token.utf8.count <= 200, Hex.decode(token) != nil else {
            throw RegistryError.invalid(tokenField, "must be 1-200 hexadecimal characters")
        }
        self.token = token.lowercased()
        self.environment = try environment.map { try APNsDevice.environment($0, field: environmentField) }
    }

    public init(token: String, environment: APNsEnvironment?) {
        self.token = token
        self.environment = environment
    }

    /// `SANDBOX` or `PROD`.
    public static func environment(_ text: String, field: String) throws -> APNsEnvironment {
        guard let value = APNsEnvironment(rawValue: text) else {
            throw RegistryError.invalid(field, "must be SANDBOX or PROD")
        }
        return value
    }
}
