#!/usr/bin/env bash
# Builds the libFuzzer targets of the Fuzz/ package and runs each for a while (coverage-guided, AddressSanitizer),
# failing on any crash, leak, timeout or property violation (a target's precondition). Fuzz/ is a package of its
# own built with `-sanitize=fuzzer,address -parse-as-library`, so the instrumentation also covers what the
# verifier parses with (swift-certificates, swift-asn1); the normal build and tests never include it.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET=10] [TARGET…]     # .ci/run: 10 s each; docs/fuzzing.md reports longer runs
#
# Targets: StrictJSON Base64 RequestBody Verifier APIResponses CustomerPurchase. Each run starts from the committed
# seeds (Fuzz/corpus/<target>/) plus what earlier runs found (.build-fuzz/corpus/, git-ignored). A failing input is
# kept as .build-fuzz/artifacts/<target>-crash-…: make it a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(StrictJSON Base64 RequestBody Verifier APIResponses CustomerPurchase ArchivedJWS)

# gold crashes formatting a location while linking the sanitized binaries; lld links them.
echo "== build the fuzz targets (Fuzz/, release, -sanitize=fuzzer,address)"
build_log=.build-fuzz/build.log
mkdir -p .build-fuzz/artifacts
if ! swift build --package-path Fuzz -c release -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library \
    -Xswiftc -Xclang-linker -Xswiftc -fuse-ld=lld >"$build_log" 2>&1; then
    grep -E "error" "$build_log" | head -20 >&2
    echo "the fuzz targets did not build (log: $build_log)" >&2
    exit 1
fi
bin=$(swift build --package-path Fuzz -c release --show-bin-path)

failed=()
for target in "${targets[@]}"; do
    binary=$bin/Fuzz$target
    [[ -x $binary ]] || { echo "no fuzz target $target ($binary)" >&2; exit 1; }
    corpus=.build-fuzz/corpus/$target
    mkdir -p "$corpus"
    echo "== fuzz $target for ${seconds}s"
    log=.build-fuzz/$target.log
    # SWIFT_BACKTRACE off: libFuzzer reports the crash and writes the input; the Swift backtracer would get in the way.
    if LSAN_OPTIONS=suppressions=Fuzz/lsan-suppressions.txt:print_suppressions=0 SWIFT_BACKTRACE=enable=no "$binary" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix=".build-fuzz/artifacts/$target-" "$corpus" "Fuzz/corpus/$target" >"$log" 2>&1; then
        grep -E "^Done|stat::number_of_executed_units|stat::peak_rss_mb" "$log" | tr '\n' ' '
        echo "$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)"
    else
        echo "FAILED: $target (log: $log)" >&2
        grep -E "Fatal error|ERROR: |SUMMARY|Test unit written|Base64:" "$log" | head -10 >&2
        failed+=("$target")
    fi
done
if ((${#failed[@]})); then
    echo "fuzzing found failures in: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz targets: ${#targets[@]} clean, none failing"
