// swift-tools-version:6.0
import PackageDescription

// libFuzzer targets for the parsers that read what clients send. Built and run by `scripts/fuzz.sh`, which passes
// `-sanitize=fuzzer,address` so the parsers themselves are instrumented; see docs/security.md.
let package = Package(
    name: "TokenRegistryFuzz",
    dependencies: [.package(name: "TokenRegistry", path: "..")],
    targets: [
        .target(name: "FuzzSupport"),
        .executableTarget(
            name: "FuzzHTTP",
            dependencies: ["FuzzSupport", .product(name: "TokenRegistryParsers", package: "TokenRegistry")]),
        .executableTarget(
            name: "FuzzJSON",
            dependencies: ["FuzzSupport", .product(name: "TokenRegistryParsers", package: "TokenRegistry")]),
        .executableTarget(
            name: "FuzzCondition",
            dependencies: ["FuzzSupport", .product(name: "TokenRegistryParsers", package: "TokenRegistry")]),
        .executableTarget(
            name: "FuzzJWT",
            dependencies: ["FuzzSupport", .product(name: "TokenRegistryParsers", package: "TokenRegistry")]),
        .executableTarget(
            name: "FuzzSignature",
            dependencies: ["FuzzSupport", .product(name: "TokenRegistryParsers", package: "TokenRegistry")]),
        .executableTarget(
            name: "FuzzAssertion",
            dependencies: ["FuzzSupport", .product(name: "TokenRegistryParsers", package: "TokenRegistry")]),
        .executableTarget(
            name: "FuzzForm",
            dependencies: ["FuzzSupport", .product(name: "TokenRegistryParsers", package: "TokenRegistry")]),
        .executableTarget(
            name: "FuzzProtobuf",
            dependencies: ["FuzzSupport", .product(name: "TokenRegistryParsers", package: "TokenRegistry")]),
    ]
)
