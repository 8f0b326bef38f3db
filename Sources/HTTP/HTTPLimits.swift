/// Limits on what a client may send, each answered with its own status.
public struct HTTPLimits: Sendable {
    /// Longest request line, in bytes (414 beyond it).
    public var maxRequestLineBytes = 8 * 1024
    /// Most bytes in the header section after the request line (431 beyond it).
    public var maxHeaderBytes = 32 * 1024
    /// Most header fields (431 beyond it).
    public var maxHeaderCount = 100
    /// Largest body after de-chunking and decompression (413 beyond it).
    public var maxBodyBytes = 1024 * 1024

    public init() {}
}

/// Why a request could not be parsed: the status to answer with, and a message for the client.
public struct HTTPParseError: Error, Sendable, Equatable {
    public let status: Int
    public let message: String

    public init(_ status: Int, _ message: String) {
        self.status = status
        self.message = message
    }
}
