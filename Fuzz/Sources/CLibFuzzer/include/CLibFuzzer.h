#ifndef C_LIB_FUZZER_H
#define C_LIB_FUZZER_H
#include <stddef.h>
#include <stdint.h>

/// libFuzzer's own driver (compiler-rt, LLVM 12 and later): parses libFuzzer's flags and runs `callback`.
/// SwiftPM links executables with `--defsym main=<Module>_main`, so libFuzzer's `main` is never pulled in; each
/// target's `<Module>_main` calls this instead.
int LLVMFuzzerRunDriver(int * _Nonnull argc, char * _Nullable * _Nullable * _Nonnull argv,
                        int (* _Nonnull callback)(const uint8_t * _Nonnull data, size_t size));

#endif
