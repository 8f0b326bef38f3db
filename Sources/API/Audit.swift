import Crypto
import HTTP
import Registry

/// What a route writes to the audit log when a server credential calls it: the action's name and what it acts on.
/// Declared where the route is registered (``Routes/add(_:_:_:browser:errors:audit:admit:_:)``); a test walks the
/// route table and fails for a route a server credential can change state through that declares none.
public struct Audit: Sendable {
    public let action: String
    let target: @Sendable (RequestContext) -> AuditTarget

    /// Acts on the installation the path parameter names.
    public static func installation(_ action: String, _ parameter: String = "fid") -> Audit {
        Audit(action: action) { .installation($0.parameter(parameter)) }
    }

    /// Acts on the installation a registration path parameter names, by FID or by one of its tokens: a token that
    /// carries its FID names that installation; any other (APNs, web push) is named by a keyed hash only, never in
    /// clear (a token is a sendable credential).
    public static func registration(_ action: String, _ parameter: String = "registration") -> Audit {
        Audit(action: action) { context in
            let value = context.parameter(parameter)
            if Identifiers.isValidFID(value) { return .installation(value) }
            if let fid = RegistrationToken.fid(of: value) { return .installation(fid) }
            return .token(value)
        }
    }

    /// Acts on the person the path parameter names, as the route stores the ID (normalised: ``UserService/validate(
    /// userID:field:)``): the entry's digest is then the one the person's erasure purges by, whichever spelling the
    /// path used (a decomposed `Jose\u{301}` kept its clear name past the purge). An invalid ID, refused by the route,
    /// is kept as sent.
    public static func user(_ action: String, _ parameter: String = "userId") -> Audit {
        Audit(action: action) { context in
            let raw = context.parameter(parameter)
            return .user((try? UserService.validate(userID: raw)) ?? raw)
        }
    }

    /// Acts on a resource named by `template`, its `{parameters}` filled from the path. It must name no installation,
    /// token or user (those are subjects, kept as keyed hashes once purged: ``installation(_:_:)``, ``user(_:_:)``).
    public static func resource(_ action: String, _ template: String) -> Audit {
        Audit(action: action) { context in
            var text = template
            for (name, value) in context.parameters { text = text.replacingOccurrences(of: "{\(name)}", with: value) }
            return .resource(text)
        }
    }

    /// The outcome an answer records: `OK`, or its canonical status.
    static func outcome(_ status: Int) -> String { status < 400 ? "OK" : CanonicalStatus.code(for: status) }
}

/// A caller the audit log can name: a server credential, by its ID. Installations, apps, devices and linked services
/// act on their own data only and are not audited.
public protocol AuditedCaller: Sendable {
    /// The credential's ID, never its secret; nil when this caller is not audited.
    var auditActor: String? { get }
    var auditProject: String? { get }
}

extension ServerCaller: AuditedCaller {
    public var auditActor: String? { actor }
    public var auditProject: String? { project.id }
}

extension OneOf: AuditedCaller {
    public var auditActor: String? {
        switch self {
        case let .first(caller): return (caller as? any AuditedCaller)?.auditActor
        case let .second(caller): return (caller as? any AuditedCaller)?.auditActor
        }
    }

    public var auditProject: String? {
        switch self {
        case let .first(caller): return (caller as? any AuditedCaller)?.auditProject
        case let .second(caller): return (caller as? any AuditedCaller)?.auditProject
        }
    }
}

/// What a route's run needs besides its request: who is calling, and where actions are recorded.
public struct RouteEnvironment: Sendable {
    let auth: Authenticator
    let audit: AuditService?
    /// Actions whose calls append no entry (``Configuration/auditSkippedActions``).
    let skipped: Set<String>
    /// Told when an entry could not be appended (the action's answer stands; the failure is logged and counted).
    let auditFailed: @Sendable (any Error, RequestContext) -> Void

    /// The log, actor and project of a call of `audit` by `caller`; nil when the call is not audited (no log, an
    /// action skipped by configuration, a caller that is not a server credential).
    private func logged(_ audit: Audit, _ caller: Any) -> (AuditService, actor: String, project: String)? {
        guard let log = self.audit, !skipped.contains(audit.action), let audited = caller as? any AuditedCaller,
            let actor = audited.auditActor, let project = audited.auditProject
        else { return nil }
        return (log, actor, project)
    }

    /// Runs a call of an audited route and appends its entry with the outcome it ended in, unless `appended` says the
    /// call's write appended that entry already.
    func audited(
        _ audit: Audit, _ caller: Any, _ context: RequestContext, _ errors: ErrorShape,
        appended: (@Sendable () -> String?)?, _ body: () async throws -> HTTPResponse
    ) async throws -> HTTPResponse {
        let response: HTTPResponse
        do {
            response = try await body()
        } catch {
            let outcome = Audit.outcome(errors.response(error).status)
            if appended?() != outcome { await record(audit, caller, context: context, outcome: outcome) }
            throw error
        }
        let outcome = Audit.outcome(response.status)
        if appended?() != outcome { await record(audit, caller, context: context, outcome: outcome) }
        return response
    }

    /// The entry of `audit` for a call by `caller`, for its write to append (``AuditCompanion``); nil when the call
    /// is not audited.
    func companion<Outcome>(
        _ audit: Audit, _ caller: Any, _ context: RequestContext, outcomes: [Outcome: String]
    ) -> AuditCompanion<Outcome>? {
        guard let (log, actor, project) = logged(audit, caller) else { return nil }
        return log.companion(
            projectID: project, action: audit.action, target: audit.target(context), actor: actor,
            requestID: context.requestID, outcomes: outcomes)
    }

    /// Appends the entry of `audit` for a call by `caller` that ended in `outcome`.
    func record(_ audit: Audit, _ caller: Any, context: RequestContext, outcome: String) async {
        guard let (log, actor, project) = logged(audit, caller) else { return }
        do {
            try await log.record(
                projectID: project, action: audit.action, target: audit.target(context), actor: actor,
                requestID: context.requestID, outcome: outcome)
        } catch {
            auditFailed(error, context)
        }
    }
}
