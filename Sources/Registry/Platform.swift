/// The platforms an app can be registered for.
public enum Platform: String, Sendable, CaseIterable {
    case ios, android, web
}
