import Foundation

/// A linked service that proved itself: a `Registry-Signature` made for one purpose with a secret in force for the
/// service. Only ``DeletionService/authenticate(projectID:service:signature:body:for:)`` makes one, so the calls that
/// take it (an acknowledgement, the service's own rotation) cannot run on an unverified request.
public struct SignedByService: Sendable {
    public let projectID: String
    public let service: String
    /// Who holds the secret that made the signature: a secret a server-key call handed out is the project's.
    public let holder: SecretHolder
    /// What the signature vouches for.
    public let purpose: WebhookSignature.Purpose
}

extension WebhookSignature.Purpose {
    /// A rotation must be signed with the current secret; anything else may use the previous one during its overlap.
    var acceptsPreviousSecret: Bool {
        if case .rotation = self { return false }
        return true
    }

    /// Whether what it names can be on record at all (an acknowledgement's FID by its rule, its delivery id printable):
    /// checked before any store call.
    var isWellFormed: Bool {
        if case let .acknowledgement(_, fid, _, deliveryID) = self {
            return Identifiers.isValidFID(fid) && Identifiers.isPlainText(deliveryID)
        }
        return true
    }

    /// The refusal for a request that is not signed for this purpose: what to sign, with what.
    public var refusal: String {
        switch self {
        case .notice:
            return "Registry-Signature is required"
        case .acknowledgement:
            return
                "an acknowledgement must carry Registry-Signature: t=<unix seconds>,v1=<HMAC-SHA256 with the service's secret of \"registry-ack.v1\\n<t>\\n<project>\\n<fid>\\n<service>\\n<deliveryId>\\n<body>\">, made within 5 minutes"
        case .rotation:
            return
                "a rotation must carry Registry-Signature: t=<unix seconds>,v1=<HMAC-SHA256 with the service's current secret of \"registry-rotate.v1\\n<t>\\n<project>\\n<service>\\n<body>\">, made within 5 minutes"
        }
    }
}

/// What a linked service does with its own signature: prove itself, confirm deliveries, replace its secret.
extension DeletionService {
    /// Checks a request's `Registry-Signature` against the secrets in force for the service.
    ///
    /// No such service answers as a bad signature does: a stranger learns nothing of which services exist.
    ///
    /// - Parameters:
    ///   - signature: the request's `Registry-Signature` header (nil when it has none).
    ///   - body: the request's raw body, as signed.
    /// - Throws: `.unauthenticated` (with what to sign, ``WebhookSignature/Purpose/refusal``) when the signature is
    ///   missing, stale, or made with no secret of the service's in force for `purpose`.
    public func authenticate(
        projectID: String, service: String, signature: String?, body: [UInt8], for purpose: WebhookSignature.Purpose
    ) async throws -> SignedByService {
        guard let signature, DeletionService.isValidServiceName(service), purpose.isWellFormed,
            let keys = try await store.linkedServiceSecrets(projectID: projectID, name: service, at: clock.now())
        else { throw RegistryError(.unauthenticated, purpose.refusal) }
        let candidates = purpose.acceptsPreviousSecret ? keys.secrets : Array(keys.secrets.prefix(1))
        guard
            let signer = WebhookSignature.signer(
                header: signature, secrets: candidates.map(\.secret), body: body,
                now: DeletionService.wallClockSeconds(), for: purpose)
        else { throw RegistryError(.unauthenticated, purpose.refusal) }
        return SignedByService(projectID: projectID, service: service, holder: candidates[signer].holder, purpose: purpose)
    }

    /// The linked service asks for a new secret, with a request signed with its current one
    /// (``WebhookSignature/Purpose/rotation(project:service:)``): the answer goes only to the service, so the new
    /// secret is the service's alone and signs acknowledgements.
    ///
    /// - Returns: the new secret and until when the old one works; nil when the service went away meanwhile.
    /// - Throws: `.invalidArgument` when `signed` vouches for something else.
    public func rotateSecret(_ signed: SignedByService) async throws -> (secret: String, previousUntil: Date)? {
        guard signed.purpose == .rotation(project: signed.projectID, service: signed.service) else {
            throw RegistryError(.invalidArgument, "the signature was not made for this rotation")
        }
        return try await rotate(projectID: signed.projectID, name: signed.service, holder: .service)
    }

    /// A service confirms, after answering 202, that it deleted the installation's data. The confirmation is the
    /// service's own word: signed for this very delivery (``WebhookSignature/Purpose/acknowledgement``) with a
    /// secret the service holds alone, never a server key's, nor one a server-key call handed out.
    ///
    /// - Throws: `.permissionDenied` when it was signed with a secret the project holds; `.invalidArgument` when
    ///   `signed` vouches for something else; `.notFound` when no such delivery is on record; `.failedPrecondition`
    ///   when the delivery is closed another way (abandoned).
    public func acknowledge(_ signed: SignedByService) async throws {
        guard case let .acknowledgement(project, fid, service, deliveryID) = signed.purpose,
            project == signed.projectID, service == signed.service, Identifiers.isValidFID(fid),
            Identifiers.isPlainText(deliveryID)
        else { throw RegistryError(.invalidArgument, "the signature was not made for an acknowledgement") }
        guard signed.holder == .service else {
            throw RegistryError(
                .permissionDenied,
                "this secret was handed out through a server key; the service must first replace it with its own (POST …/linkedServices/\(service):rotateSecret, signed with it)"
            )
        }
        switch try await store.acknowledge(
            projectID: project, fid: fid, service: service, deliveryID: deliveryID, at: clock.now())
        {
        case .acknowledged, .alreadyAcknowledged: return
        case .notFound:
            throw RegistryError(.notFound, "no delivery \(deliveryID.prefix(64)) of this deletion to \(service) is on record")
        case let .closed(state):
            throw RegistryError(.failedPrecondition, "the delivery is \(state.rawValue); an acknowledgement cannot reopen it")
        }
    }

    /// ``authenticate(projectID:service:signature:body:for:)`` for the delivery's acknowledgement, then
    /// ``acknowledge(_:)``: the whole of a signed acknowledgement, for callers that hold the raw request.
    public func acknowledge(
        projectID: String, fid: String, service: String, deliveryID: String, signature: String?, body: [UInt8]
    ) async throws {
        try await acknowledge(
            authenticate(
                projectID: projectID, service: service, signature: signature, body: body,
                for: .acknowledgement(project: projectID, fid: fid, service: service, deliveryID: deliveryID)))
    }

    /// ``authenticate(projectID:service:signature:body:for:)`` for the rotation, then ``rotateSecret(_:)``.
    public func rotateSecretAsService(projectID: String, name: String, signature: String?, body: [UInt8])
        async throws -> (secret: String, previousUntil: Date)?
    {
        try await rotateSecret(
            authenticate(
                projectID: projectID, service: name, signature: signature, body: body,
                for: .rotation(project: projectID, service: name)))
    }
}
