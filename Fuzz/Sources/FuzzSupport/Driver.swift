import CLibFuzzer

/// Runs libFuzzer with the process's arguments and `target` as `LLVMFuzzerTestOneInput`. Each target calls it from
/// its `<Module>_main` (the symbol SwiftPM makes the executable's `main`; see CLibFuzzer.h).
public func runLibFuzzer(
    _ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>, _ target: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt {
    var count = argc
    var arguments: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return LLVMFuzzerRunDriver(&count, &arguments, target)
}
