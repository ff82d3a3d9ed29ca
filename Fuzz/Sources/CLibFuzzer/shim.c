// The declaration in include/CLibFuzzer.h is all this target is for; libFuzzer itself is linked by -sanitize=fuzzer.
