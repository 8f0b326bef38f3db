// swift-tools-version:6.0
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
    name: "TokenRegistry",
    products: [
        .executable(name: "token-registry", targets: ["token-registry"])
    ],
    targets: [
        // System libraries: Debian -dev packages wrapped as modules.
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        // Linux headers the Glibc module leaves out (epoll, eventfd, accept4). Nothing to link.
        .systemLibrary(name: "CLinuxShims"),

        .target(name: "JSON", swiftSettings: swiftSettings),
        .target(name: "HTTP", dependencies: ["CLinuxShims", "CZlib"], swiftSettings: swiftSettings),
        .target(name: "Postgres", dependencies: ["CLibPQ"], swiftSettings: swiftSettings),
        .target(name: "Crypto", dependencies: ["COpenSSL"], swiftSettings: swiftSettings),
        .target(
            name: "Registry", dependencies: ["Postgres", "Crypto", "JSON"],
            resources: [.embedInCode("Migrations")],
            swiftSettings: swiftSettings),
        .target(
            name: "API", dependencies: ["HTTP", "Registry", "JSON"],
            resources: [.embedInCode("Resources/openapi.yaml")],
            swiftSettings: swiftSettings),
        .executableTarget(name: "token-registry", dependencies: ["API"], swiftSettings: swiftSettings),
        .target(
            name: "TokenRegistryTesting", dependencies: ["API", "HTTP", "Postgres", "Registry"],
            path: "Sources/TokenRegistryTesting", swiftSettings: swiftSettings),

        .testTarget(name: "HTTPTests", dependencies: ["HTTP", "TokenRegistryTesting"], swiftSettings: swiftSettings),
        .testTarget(
            name: "PostgresTests", dependencies: ["Postgres", "TokenRegistryTesting"], swiftSettings: swiftSettings),
        .testTarget(name: "JSONTests", dependencies: ["JSON"], swiftSettings: swiftSettings),
        .testTarget(name: "CryptoTests", dependencies: ["Crypto"], swiftSettings: swiftSettings),
        .testTarget(
            name: "RegistryTests", dependencies: ["Registry", "TokenRegistryTesting"], swiftSettings: swiftSettings),
        .testTarget(
            name: "APITests",
            dependencies: ["API", "TokenRegistryTesting", "Postgres", "Registry", "JSON", "Crypto", "HTTP"],
            swiftSettings: swiftSettings),
    ]
)
