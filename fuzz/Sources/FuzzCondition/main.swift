import FuzzSupport
import Registry

// Any text: a condition or a positioned error. An accepted condition names at most five valid topics, and printing
// it back parses to the same tree.
func render(_ condition: Condition) -> String {
    // Parentheses only where precedence needs them (`!` binds tightest, then `&&`, then `||`, each left to right), so
    // the printed text is never nested deeper than the input that parsed.
    func grouped(_ c: Condition, when needed: Bool) -> String { needed ? "(\(render(c)))" : render(c) }
    switch condition {
    case let .topic(name): return "'\(name)' in topics"
    case let .not(inner):
        if case .topic = inner { return "!" + render(inner) }
        if case .not = inner { return "!" + render(inner) }
        return "!(" + render(inner) + ")"
    case let .and(a, b):
        let leftOr = if case .or = a { true } else { false }
        let rightBinary = if case .topic = b { false } else if case .not = b { false } else { true }
        return grouped(a, when: leftOr) + " && " + grouped(b, when: rightBinary)
    case let .or(a, b):
        let rightOr = if case .or = b { true } else { false }
        return render(a) + " || " + grouped(b, when: rightOr)
    case .users:
        // Made by `targets:resolve`'s `users`, never by the parser: nothing to print.
        preconditionFailure("the parser made a users condition")
    }
}

Fuzzer.run { bytes in
    let text = String(decoding: bytes, as: UTF8.self)
    let condition: Condition
    do throws(ConditionError) {
        condition = try Condition.parse(text)
    } catch {
        precondition(error.position >= 0 && error.position <= max(text.count, Condition.maxLength), "error position")
        return
    }
    precondition(condition.topics.count <= Condition.maxTopics, "too many topics accepted")
    precondition(condition.topics.allSatisfy(Topic.isValid), "an invalid topic name accepted")
    let printed = render(condition)
    if printed.count <= Condition.maxLength {
        precondition((try? Condition.parse(printed)) == condition, "a printed condition parses differently")
    }
}
