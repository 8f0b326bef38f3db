/// An FCM topic condition such as `'a' in topics && ('b' in topics || !('c' in topics))`.
public indirect enum Condition: Sendable, Equatable {
    case topic(String)
    case not(Condition)
    case and(Condition, Condition)
    case or(Condition, Condition)
    /// Installations bound to any of these user IDs. Not FCM's grammar: `targets:resolve`'s `users` makes it, alone or
    /// and-ed with a parsed condition.
    case users([String])

    /// At most this many topics in one condition (FCM's limit).
    public static let maxTopics = 5
    public static let maxLength = 1024

    /// Every topic the condition names, in order of appearance.
    public var topics: [String] {
        switch self {
        case let .topic(t): return [t]
        case let .not(c): return c.topics
        case let .and(a, b), let .or(a, b): return a.topics + b.topics
        case .users: return []
        }
    }

    /// The topics the condition requires of every target (its top-level conjuncts that are topics, each once, in
    /// order), and what remains of it (nil when nothing does). A store reads a page from the first such topic's
    /// subscribers; a condition that requires none is read from the project's registrations, each tested.
    public var requiredTopics: (topics: [String], rest: Condition?) {
        var topics: [String] = []
        var rest: [Condition] = []
        func walk(_ c: Condition) {
            switch c {
            case let .and(a, b):
                walk(a)
                walk(b)
            case let .topic(name):
                if !topics.contains(name) { topics.append(name) }
            default: rest.append(c)
            }
        }
        walk(self)
        return (topics, rest.dropFirst().reduce(rest.first) { all, next in all.map { .and($0, next) } })
    }

    /// Parses a condition.
    ///
    /// - Throws: ``ConditionError`` with the 0-based character position of the problem.
    public static func parse(_ text: String) throws(ConditionError) -> Condition {
        guard text.count <= maxLength else {
            throw ConditionError(position: maxLength, message: "condition longer than \(maxLength) characters")
        }
        var parser = ConditionParser(Array(text))
        let condition = try parser.parseOr(depth: 0)
        parser.skipSpaces()
        guard parser.index == parser.chars.count else {
            throw parser.error("unexpected '\(parser.chars[parser.index])'")
        }
        guard condition.topics.count <= maxTopics else {
            throw ConditionError(
                position: 0, message: "a condition may name at most \(maxTopics) topics, not \(condition.topics.count)")
        }
        return condition
    }
}

/// Why a condition did not parse, and where.
public struct ConditionError: Error, Sendable, Equatable, CustomStringConvertible {
    public let position: Int
    public let message: String
    public var description: String { "\(message) at position \(position)" }
}

/// Recursive descent: `or := and ('||' and)*`, `and := unary ('&&' unary)*`, `unary := '!' unary | primary`,
/// `primary := '(' or ')' | quoted-topic 'in' 'topics'`.
struct ConditionParser {
    let chars: [Character]
    var index = 0

    init(_ chars: [Character]) { self.chars = chars }

    func error(_ message: String) -> ConditionError { ConditionError(position: index, message: message) }

    mutating func skipSpaces() {
        while index < chars.count, chars[index] == " " || chars[index] == "\t" || chars[index] == "\n" { index += 1 }
    }

    mutating func consume(_ token: String) -> Bool {
        skipSpaces()
        let t = Array(token)
        guard index + t.count <= chars.count, Array(chars[index..<index + t.count]) == t else { return false }
        index += t.count
        return true
    }

    mutating func parseOr(depth: Int) throws(ConditionError) -> Condition {
        var left = try parseAnd(depth: depth)
        while consume("||") { left = .or(left, try parseAnd(depth: depth)) }
        return left
    }

    mutating func parseAnd(depth: Int) throws(ConditionError) -> Condition {
        var left = try parseUnary(depth: depth)
        while consume("&&") { left = .and(left, try parseUnary(depth: depth)) }
        return left
    }

    mutating func parseUnary(depth: Int) throws(ConditionError) -> Condition {
        guard depth < 32 else { throw error("condition nested too deeply") }
        if consume("!") { return .not(try parseUnary(depth: depth + 1)) }
        return try parsePrimary(depth: depth)
    }

    mutating func parsePrimary(depth: Int) throws(ConditionError) -> Condition {
        skipSpaces()
        guard index < chars.count else { throw error("expected a topic or '(' but the condition ended") }
        if consume("(") {
            let inner = try parseOr(depth: depth + 1)
            guard consume(")") else { throw error("expected ')'") }
            return inner
        }
        let quote = chars[index]
        guard quote == "'" || quote == "\"" else { throw error("expected a quoted topic name or '('") }
        let start = index
        index += 1
        var name = ""
        while index < chars.count, chars[index] != quote {
            name.append(chars[index])
            index += 1
        }
        guard index < chars.count else { throw ConditionError(position: start, message: "unterminated topic name") }
        index += 1
        guard Topic.isValid(name) else {
            throw ConditionError(position: start, message: "invalid topic name (allowed: [a-zA-Z0-9-_.~%]{1,900})")
        }
        guard consume("in") else { throw error("expected 'in topics'") }
        guard consume("topics") else { throw error("expected 'topics'") }
        return .topic(name)
    }
}

/// Topic names.
public enum Topic {
    /// `(private/)?[a-zA-Z0-9-_.~%]+`, at most 900 bytes, after an optional `/topics/` prefix is removed: the admin
    /// SDKs' rule (firebase-admin-node `validateTopic`, firebase-admin-go `topicNamePattern`), which lets a name start
    /// with `private/`.
    public static func isValid(_ name: String) -> Bool {
        var bytes = Array(name.utf8)
        guard (1...900).contains(bytes.count) else { return false }
        if name.hasPrefix(privatePrefix) { bytes.removeFirst(privatePrefix.utf8.count) }
        return !bytes.isEmpty
            && bytes.allSatisfy { c in
                (65...90).contains(c) || (97...122).contains(c) || (48...57).contains(c) || "-_.~%".utf8.contains(c)
            }
    }

    /// The prefix the admin SDKs allow before a topic's name.
    public static let privatePrefix = "private/"

    /// Removes a leading `/topics/`.
    public static func normalize(_ name: String) -> String {
        name.hasPrefix("/topics/") ? String(name.dropFirst(8)) : name
    }

    /// An installation holds at most this many topics.
    public static let maxPerInstallation = 2000
}
