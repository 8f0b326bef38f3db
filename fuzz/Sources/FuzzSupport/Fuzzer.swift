import Glibc

/// Runs libFuzzer with a Swift closure as its target.
///
/// SwiftPM links an executable with `main` renamed to its module's entry point, which hides libFuzzer's own `main`,
/// so each target's `main.swift` calls ``run(_:)``, which hands the process to `LLVMFuzzerRunDriver`. A target signals
/// a bug with `precondition`: libFuzzer records the input that crashed as an artifact.
public enum Fuzzer {
    nonisolated(unsafe) static var target: ([UInt8]) -> Void = { _ in }

    public static func run(_ body: @escaping ([UInt8]) -> Void) -> Never {
        target = body
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(runDriver(&argc, &argv, testOneInput))
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    Fuzzer.target(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}

@_silgen_name("LLVMFuzzerRunDriver")
func runDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
) -> Int32
