/// An error from the cryptography layer, with the OpenSSL reason where one exists.
public struct CryptoError: Error, Sendable, CustomStringConvertible {
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        public static let randomFailed = Code("randomFailed")
        public static let digestFailed = Code("digestFailed")
        public static let invalidKey = Code("invalidKey")
        public static let signFailed = Code("signFailed")
        public static let invalidEncoding = Code("invalidEncoding")
        /// Sealed data that this key did not seal, or that was altered.
        public static let openFailed = Code("openFailed")
        public var description: String { name }
    }

    public let code: Code
    public let reason: String

    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { "\(code): \(reason)" }
}
