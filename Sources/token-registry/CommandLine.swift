/// Parsed `--name value` options and positional words of one command.
struct Arguments {
    var words: [String] = []
    /// The last value of each option.
    var options: [String: String] = [:]
    /// Every value of each option, in order (for options that may repeat, such as `--web-origin`).
    var repeated: [String: [String]] = [:]
    var flags: Set<String> = []

    /// Options that take no value.
    static let booleanFlags: Set<String> = ["help", "h", "all", "confirm", "dry-run"]

    init(_ raw: [String]) throws {
        var i = 0
        while i < raw.count {
            let arg = raw[i]
            if arg.hasPrefix("--") || arg == "-h" {
                var name = String(arg.drop(while: { $0 == "-" }))
                if let eq = name.firstIndex(of: "=") {
                    set(String(name[..<eq]), String(name[name.index(after: eq)...]))
                    name = ""
                } else if Arguments.booleanFlags.contains(name) {
                    flags.insert(name == "h" ? "help" : name)
                } else {
                    guard i + 1 < raw.count else { throw CLIError("option --\(name) needs a value") }
                    set(name, raw[i + 1])
                    i += 1
                }
            } else {
                words.append(arg)
            }
            i += 1
        }
    }

    private mutating func set(_ name: String, _ value: String) {
        options[name] = value
        repeated[name, default: []].append(value)
    }

    var wantsHelp: Bool { flags.contains("help") }

    func required(_ name: String) throws -> String {
        guard let value = options[name], !value.isEmpty else { throw CLIError("missing --\(name)") }
        return value
    }

    /// Fails on options the command does not know, so a typo is never ignored.
    func allow(_ names: Set<String>) throws {
        for name in options.keys where !names.contains(name) { throw CLIError("unknown option --\(name)") }
    }
}

/// A command-line mistake: printed as one line, exit status 2.
struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ message: String) { description = message }
}
