import Crypto
import HTTP
import JSON
import Registry

/// The audit log of a project, page by page, in chain order (`token-registry audit verify` checks the chain).
struct AuditController {
    let audit: AuditService

    func register(_ routes: inout Routes) {
        routes.add(.GET, "/v1/projects/{project}/auditLog", .serverKey, list)
    }

    func list(_ context: RequestContext, _ caller: ServerCaller) async throws -> HTTPResponse {
        let project = caller.project
        let size = try Paging.pageSize(context, default: 100, max: 1000)
        var after: Int64 = 0
        if let token = try Paging.decode(context.request.query("pageToken", "page_token")) {
            guard let seq = Int64(token), seq >= 0 else { throw APIError.invalid("pageToken: not a page token from this service") }
            after = seq
        }
        // What is pending is chained first, so a page shows the entries appended before it was asked for: one chainer
        // call (one batch, at most a share of each project), so that a read pays a bounded part of every project's
        // backlog; whatever is still pending then is counted in `pending`, and the jobs chain it within a round.
        try await audit.chain(limit: AuditService.chainBatch)
        let state = try await audit.state(projectID: project.id)
        let page = try await audit.entries(projectID: project.id, afterSeq: max(after, state?.anchorSeq ?? 0), limit: size + 1)
        var members: [(String, JSONValue)] = [("entries", .array(page.prefix(size).map(Self.json)))]
        if page.count > size, let last = page.prefix(size).last {
            members.append(("nextPageToken", .string(Paging.encode(String(last.seq)))))
        }
        members += [
            ("anchor", ["seq": .string(String(state?.anchorSeq ?? 0)), "hash": .string(Hex.encode(state?.anchorHash ?? AuditChain.genesis))]),
            ("head", ["seq": .string(String(state?.headSeq ?? 0)), "hash": .string(Hex.encode(state?.headHash ?? AuditChain.genesis))]),
            ("pending", .int(state?.pending ?? 0)),
        ]
        return .json(.object(members))
    }

    static func json(_ e: AuditEntry) -> JSONValue {
        [
            "projectId": .string(e.projectID), "seq": .string(String(e.seq)), "time": .string(Timestamp.rfc3339(e.at)),
            "timeMicros": .string(String(e.atMicros)), "action": .string(e.action),
            "target": e.target.map { .string($0) } ?? .null, "targetDigest": .string(Hex.encode(e.targetDigest)),
            "subject": .bool(e.subject),
            "actor": .string(e.actor), "requestId": .string(e.requestID), "outcome": .string(e.outcome),
            "previousHash": .string(Hex.encode(e.previousHash)), "hash": .string(Hex.encode(e.hash)),
        ]
    }
}
