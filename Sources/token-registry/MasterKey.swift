import API
import Crypto
import Foundation
import Glibc

/// The master key that seals secrets at rest: from the configuration (`SECRETS_KEY`, `SECRETS_KEY_FILE`), or a key
/// file made on first start beside the data (the embedded cluster's directory, else `./.data`), mode 0600.
enum MasterKey {
    static let fileName = "secrets.key"

    /// - Parameter dataDirectory: where a generated key file lives.
    static func box(_ configuration: Configuration, dataDirectory: String, logger: Logger) throws -> SecretBox {
        if let key = configuration.secretsKey { return try SecretBox(key: key) }
        let path = dataDirectory + "/" + fileName
        // Without a key of the operator's, one is kept beside the data; a read-only image has nowhere to keep it.
        let missing =
            "no master key: set SECRETS_KEY (the base64 of 32 random bytes: openssl rand -base64 32) or SECRETS_KEY_FILE; "
            + "without them a key file is kept in \(dataDirectory), which cannot be written"
        do {
            try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        } catch {
            throw CLIError(missing)
        }
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        if fd >= 0 {
            let text = Base64URL.encode(try SecureRandom.bytes(32)) + "\n"
            let written = text.withCString { write(fd, $0, strlen($0)) }
            close(fd)
            guard written == text.utf8.count else { throw CLIError("cannot write the master key file \(path)") }
            logger.warning(
                "generated a master key for secrets at rest; production must supply SECRETS_KEY or SECRETS_KEY_FILE "
                    + "(every replica the same), and keep it: the data's secrets cannot be read without it",
                [("file", .string(path))])
        } else if errno != EEXIST {
            throw CLIError(missing + " (\(String(cString: strerror(errno))))")
        }
        guard let data = FileManager.default.contents(atPath: path),
            let key = Configuration.masterKey(String(decoding: data, as: UTF8.self))
        else { throw CLIError("the master key file \(path) does not hold the base64 of 32 bytes") }
        return try SecretBox(key: key)
    }
}
