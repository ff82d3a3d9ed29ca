#!/usr/bin/env bash
# Builds the libFuzzer targets in Fuzz/ and runs each for a while (coverage-guided, AddressSanitizer), failing on any
# crash, leak, timeout or property violation (a target's precondition). The targets compile the parsers' own source
# files with the harness (swiftc -sanitize=fuzzer,address), so the normal build and tests never include them.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET=20] [TARGET…]     # .ci/run: 20 s each; docs/fuzzing.md reports longer runs
#
# Each run starts from the committed seeds (Fuzz/corpus/<target>/) plus what earlier runs found (.build-fuzz/corpus/,
# git-ignored). A failing input is kept as .build-fuzz/artifacts/<target>-crash-…: make it a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(StrictJSON Base64 RequestBody)

# The parsers under test, pure Swift with no I/O (AppStoreNotifications' files that the targets need).
core=Sources/AppStoreNotifications
sources=("$core/JSONValue.swift" "$core/JSONValueDecoder.swift" "$core/StrictJSONParser.swift" "$core/UntrustedText.swift"
    "$core/Base64.swift" "$core/UnverifiedPeek.swift" "$core/NotificationRequestBody.swift")
for model in "$core"/Models/*.swift; do [[ $model == */UnknownValues.swift ]] || sources+=("$model"); done

mkdir -p .build-fuzz/artifacts
failed=()
for target in "${targets[@]}"; do
    binary=.build-fuzz/fuzz-$target
    if [[ ! -x $binary || -n $(find "${sources[@]}" "Fuzz/${target}Fuzz.swift" -newer "$binary" 2>/dev/null | head -1) ]]; then
        echo "== build $target"
        swiftc -sanitize=fuzzer,address -parse-as-library -O -module-name "Fuzz$target" "${sources[@]}" "Fuzz/${target}Fuzz.swift" -o "$binary" 2>&1 \
            | grep -v "Cannot export local symbol" || true
        [[ -x $binary ]] || { echo "fuzz target $target did not build" >&2; exit 1; }
    fi
    corpus=.build-fuzz/corpus/$target
    mkdir -p "$corpus"
    echo "== fuzz $target for ${seconds}s"
    log=.build-fuzz/$target.log
    # SWIFT_BACKTRACE off: libFuzzer reports the crash and writes the input; the Swift backtracer would get in the way.
    if SWIFT_BACKTRACE=enable=no "$binary" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
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
