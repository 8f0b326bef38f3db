import Testing

@testable import HTTP

@Suite("Router")
struct RouterTests {
    var router: Router<String> {
        var r = Router<String>()
        r.add("POST", "/v1/projects/{project}/installations", "create")
        r.add("DELETE", "/v1/projects/{project}/installations/{fid}", "delete")
        r.add("POST", "/v1/projects/{project}/installations/{fid}/authTokens:generate", "generate")
        r.add("POST", "/v1/projects/{project}/registrations/{fid}/topicSubscriptions/{topic}:subscribe", "subscribe")
        r.add(
            "POST", "/v1/projects/{project}/registrations/{fid}/topicSubscriptions/{topic}:unsubscribe", "unsubscribe")
        r.add("GET", "/v1/projects/{project}/registrations/{token}:sendability", "sendability")
        r.add("PATCH", "/v1/projects/{project}/registrations/{token}", "patch")
        r.add("POST", "/iid/v1:batchAdd", "batchAdd")
        r.add("GET", "/healthz", "health")
        return r
    }

    func name(_ method: String, _ path: String) -> String? {
        if case let .found(h, _, _) = router.match(method: method, path: path) { return h }
        return nil
    }

    /// A percent-encoded control character (NUL, CR, LF, any C0, DEL) in any segment never reaches a handler.
    @Test func percentEncodedControlsAreABadPath() {
        var router = Router<Int>()
        router.add("POST", "/v1/projects/{project}/linkedServices/{name}:rotateSecret", 1)
        router.add("GET", "/v1/{a}", 2)
        for byte in Array(0...0x1f) + [0x7f] {
            let escape = "%" + String(format: "%02X", byte)
            for path in ["/v1/projects/p/linkedServices/crm\(escape):rotateSecret", "/v1/\(escape)x", "/v1/a\(escape)"] {
                let method = path.hasSuffix(":rotateSecret") ? "POST" : "GET"
                guard case .badPath = router.match(method: method, path: path) else {
                    Issue.record("\(path) was not refused")
                    continue
                }
            }
        }
        guard case .found = router.match(method: "GET", path: "/v1/a%20b") else {
            Issue.record("a printable escape is still a parameter")
            return
        }
    }

    @Test func customVerbsAndParams() {
        #expect(name("POST", "/v1/projects/p/installations/f/authTokens:generate") == "generate")
        #expect(name("POST", "/v1/projects/p/installations/") == "create")
        #expect(name("POST", "/v1/projects/p/installations") == "create")
        #expect(name("POST", "/iid/v1:batchAdd") == "batchAdd")
        #expect(name("POST", "/v1/projects/p/registrations/f/topicSubscriptions/news:subscribe") == "subscribe")
        #expect(name("POST", "/v1/projects/p/registrations/f/topicSubscriptions/news:unsubscribe") == "unsubscribe")
        #expect(name("GET", "/v1/projects/p/registrations/fid:APA91b:sendability") == "sendability")
        #expect(name("PATCH", "/v1/projects/p/registrations/fid:APA91b") == "patch")
        #expect(name("HEAD", "/healthz") == "health")
    }

    @Test func percentDecodingHappensOnceAfterSplitting() {
        guard
            case let .found(_, params, _) = router.match(
                method: "PATCH", path: "/v1/projects/p/registrations/to%3Ak%2Fx")
        else {
            Issue.record("no match"); return
        }
        #expect(params["token"] == "to:k/x")
        guard case let .found(_, p2, _) = router.match(method: "PATCH", path: "/v1/projects/p/registrations/a%2525b")
        else { return }
        #expect(p2["token"] == "a%25b")
    }

    /// Paths are split by byte: a slash is a delimiter even where a combining mark follows it (as one `Character`
    /// it would not be), raw UTF-8 in a segment is kept, and a path that does not start with a slash is refused.
    @Test func pathsAreSplitByByte() {
        guard case let .found(_, params, _) = router.match(method: "POST", path: "/v1/projects/é/installations")
        else {
            Issue.record("no match"); return
        }
        #expect(params["project"] == "é")
        #expect(name("POST", "/v1/projects/p/installations/\u{301}") == nil)
        guard
            case let .found(_, combining, _) = router.match(
                method: "DELETE", path: "/v1/projects/p/installations/\u{301}x")
        else {
            Issue.record("no match"); return
        }
        #expect(combining["fid"] == "\u{301}x")
        if case .badPath = router.match(method: "GET", path: "healthz") {} else { Issue.record("expected bad path") }
        if case .badPath = router.match(method: "GET", path: "") {} else { Issue.record("expected bad path") }
        #expect(name("GET", "/healthz/") == "health")
        if case .notFound = router.match(method: "GET", path: "/") {} else { Issue.record("expected 404") }
    }

    @Test func aCustomVerbPathNeverFallsBackToABroaderTemplate() {
        guard
            case let .methodNotAllowed(allowed) = router.match(
                method: "PATCH", path: "/v1/projects/p/registrations/tok:sendability")
        else {
            Issue.record("expected 405"); return
        }
        #expect(allowed == ["GET", "HEAD"])
        #expect(name("PATCH", "/v1/projects/p/registrations/tok:other") == "patch")
    }

    @Test func notFoundAndMethodNotAllowed() {
        guard case let .methodNotAllowed(allowed) = router.match(method: "GET", path: "/v1/projects/p/installations")
        else {
            Issue.record("expected 405"); return
        }
        #expect(allowed == ["POST"])
        if case .notFound = router.match(method: "GET", path: "/nope") {} else { Issue.record("expected 404") }
        if case .notFound = router.match(method: "POST", path: "/v1/projects/p/installations//") {
        } else {
            Issue.record("expected 404")
        }
        if case .badPath = router.match(method: "GET", path: "/healthz%e2%82") {
        } else {
            Issue.record("expected bad path: the escapes are not UTF-8")
        }
        // A `%` that starts no escape is itself (a topic sent unencoded): the segment is another name, not a bad path.
        if case .notFound = router.match(method: "GET", path: "/healthz%zz") {} else { Issue.record("expected 404") }
        if case .notFound = router.match(
            method: "POST", path: "/v1/projects/p/registrations/f/topicSubscriptions/:subscribe")
        {
        } else {
            Issue.record("an empty topic must not match")
        }
    }
}
