import Foundation

/// Whom a register-API token is for. FirebaseMessaging on iOS keeps one token per sender (`sender` and `X-subtype`,
/// its "authorized entity") and scope (`X-scope`): `retrieveFCMToken(forSenderID:)` and
/// `deleteFCMToken(forSenderID:)` take any sender (`Token/FIRMessagingTokenManager.m`). The project's own sender (its
/// number) with scope `*` is the installation's registration, the one every other route targets; any other pair gets
/// a token of its own, kept beside it and deleted one by one. `sender=*` is `deleteData`'s wildcard.
public enum TokenAudience: Hashable, Sendable {
    /// No sender, or the project's number as the sender with scope `*` (or none): the installation's registration.
    case project
    /// Another sender or scope.
    case sender(String, scope: String)
    /// Every token of the installation: `deleteData` (`sender=*`), or a delete that names no sender (the SDK's
    /// clean-up of a check-in it found after a fresh install).
    case everything

    public static let defaultScope = "*"
    static let wildcard = "*"

    /// The audience a register-API form names.
    ///
    /// - Throws: `.invalidArgument` for a sender or scope that is empty, over 256 bytes or holds control characters,
    ///   and for the wildcard outside a delete.
    public static func of(sender: String?, scope: String?, project: Project, deleting: Bool) throws -> TokenAudience {
        for (field, value) in [("sender", sender), ("X-scope", scope)] {
            if let value, value.isEmpty || !Identifiers.isPlainText(value, limit: 256) {
                throw RegistryError.invalid(field, "must be 1 to 256 bytes of printable text")
            }
        }
        guard let sender else { return deleting ? .everything : .project }
        let scope = scope ?? defaultScope
        if sender == wildcard {
            guard deleting else { throw RegistryError.invalid("sender", "* names every token; it can only delete") }
            return .everything
        }
        if sender == String(project.number) && scope == defaultScope { return .project }
        return .sender(sender, scope: scope)
    }
}

/// What became of a request for a sender's token.
public enum SenderTokenWrite: Sendable, Equatable {
    case token(String)
    case installationNotFound
    case consentOff
    /// The installation holds ``RegistrationService/maxSenderTokens`` already.
    case full
}

extension RegistrationService {
    /// Tokens one installation may hold for senders other than its project (an app has a few; each is a row).
    public static let maxSenderTokens = 32

    /// The installation's token for another sender or scope: made on first use (`<FID>:<opaque>`, as iOS requires of
    /// every token it caches), the same on every later call. Refused while messaging consent is off, checked under
    /// the installation's lock as for its own registration.
    public func senderToken(installation: Installation, sender: String, scope: String) async throws -> String {
        let write = try await store.senderToken(
            projectID: installation.projectID, fid: installation.fid, sender: sender, scope: scope,
            candidate: try RegistrationToken.new(fid: installation.fid), at: clock.now(),
            limit: RegistrationService.maxSenderTokens)
        switch write {
        case let .token(token):
            try await installations.noteActivity(installation)
            return token
        case .installationNotFound:
            throw RegistryError(.notFound, "installation \(installation.fid.prefix(64)) not found")
        case .consentOff: throw RegistrationService.consentOff(installation.fid)
        case .full:
            throw RegistryError(
                .resourceExhausted,
                "installation \(installation.fid.prefix(64)) holds \(RegistrationService.maxSenderTokens) sender tokens already; delete one first",
                field: "sender")
        }
    }

    /// Deletes what `audience` names of the installation's tokens; the tokens deleted.
    public func delete(installation: Installation, _ audience: TokenAudience) async throws -> [String] {
        let (project, fid) = (installation.projectID, installation.fid)
        /// The installation's own registration: its token, when there was one to delete.
        func deleteOwn() async throws -> [String] {
            let current = try await store.find(projectID: project, fid: fid)
            return try await store.delete(projectID: project, fid: fid) ? current.map { [$0.token] } ?? [] : []
        }
        switch audience {
        case .project: return try await deleteOwn()
        case let .sender(sender, scope):
            return try await store.deleteSenderTokens(projectID: project, fid: fid, only: (sender, scope))
        case .everything:
            return try await deleteOwn() + (try await store.deleteSenderTokens(projectID: project, fid: fid, only: nil))
        }
    }
}
