// swift-tools-version:6.0
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

// Imports point down this list only (docs/architecture.md): every module declares exactly what it imports, and
// `swift build --explicit-target-dependency-import-check error` holds the manifest to that.
let package = Package(
    name: "TokenRegistry",
    products: [
        .executable(name: "token-registry", targets: ["token-registry"]),
        // For the libFuzzer targets (fuzz/Package.swift), which build these with coverage instrumentation.
        .library(name: "TokenRegistryParsers", targets: ["HTTP", "JSON", "Crypto", "Registry", "API"]),
    ],
    targets: [
        // System libraries: Debian -dev packages wrapped as modules.
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        // Linux headers the Glibc module leaves out (epoll, eventfd, accept4). Nothing to link.
        .systemLibrary(name: "CLinuxShims"),

        // Libraries with no domain knowledge.
        .target(name: "JSON", swiftSettings: swiftSettings),
        .target(name: "HTTP", dependencies: ["CLinuxShims", "CZlib"], swiftSettings: swiftSettings),
        .target(name: "Postgres", dependencies: ["CLibPQ"], swiftSettings: swiftSettings),
        .target(name: "Crypto", dependencies: ["COpenSSL"], swiftSettings: swiftSettings),

        // The domain, pure: no SQL, no HTTP.
        .target(name: "Registry", dependencies: ["Crypto", "JSON"], swiftSettings: swiftSettings),
        // Every SQL statement: the domain's stores on PostgreSQL, and the schema.
        .target(
            name: "RegistryPostgres", dependencies: ["Registry", "Postgres", "Crypto", "JSON"],
            resources: [.embedInCode("Migrations")],
            swiftSettings: swiftSettings),
        // Routes: wire formats to domain calls. No SQL.
        .target(
            name: "API", dependencies: ["HTTP", "Registry", "JSON", "Crypto"],
            resources: [.embedInCode("Resources/openapi.yaml")],
            swiftSettings: swiftSettings),
        // The CLI and the composition root: the only module that knows both the API and PostgreSQL.
        .executableTarget(
            name: "token-registry", dependencies: ["API", "HTTP", "CLinuxShims", "Registry", "RegistryPostgres", "Postgres", "JSON", "Crypto"],
            swiftSettings: swiftSettings),
        // Test support: live services on port 0, throwaway databases, in-memory stores, a raw HTTP client.
        .target(
            name: "TokenRegistryTesting",
            dependencies: ["API", "HTTP", "JSON", "Postgres", "Registry", "RegistryPostgres", "Crypto"],
            path: "Sources/TokenRegistryTesting", swiftSettings: swiftSettings),

        .testTarget(name: "HTTPTests", dependencies: ["HTTP", "TokenRegistryTesting"], swiftSettings: swiftSettings),
        .testTarget(
            name: "PostgresTests", dependencies: ["Postgres", "TokenRegistryTesting"], swiftSettings: swiftSettings),
        .testTarget(name: "JSONTests", dependencies: ["JSON"], swiftSettings: swiftSettings),
        .testTarget(name: "CryptoTests", dependencies: ["Crypto"], swiftSettings: swiftSettings),
        .testTarget(
            name: "RegistryTests", dependencies: ["Registry", "RegistryPostgres", "Postgres", "TokenRegistryTesting", "Crypto", "JSON"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "APITests",
            dependencies: [
                "API", "TokenRegistryTesting", "Postgres", "Registry", "RegistryPostgres", "JSON", "Crypto", "HTTP",
            ],
            swiftSettings: swiftSettings),
        // The API in process: the responder over the in-memory stores, requests in memory (no socket, no PostgreSQL).
        .testTarget(
            name: "InProcessTests", dependencies: ["API", "TokenRegistryTesting", "Registry", "JSON", "Crypto", "HTTP"],
            swiftSettings: swiftSettings),
        .testTarget(name: "ArchitectureTests", swiftSettings: swiftSettings),
    ]
)
