#!/usr/bin/env bash
# Regenerates Sources/CustomerAPI/Generated/ from docs/customer-api.yaml with swift-openapi-generator (the version
# in the package mirror), built once into .build-openapi/ (git-ignored). Run after editing the spec; commit both.
# The build plugin would do the same in every clean build, which CI would pay on each run (docs/customer-api.md).
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.14.3
tool_package=.build-openapi/package
mkdir -p "$tool_package"
cat >"$tool_package/Package.swift" <<MANIFEST
// swift-tools-version:6.0
import PackageDescription
let package = Package(
    name: "openapi-tool",
    dependencies: [.package(url: "https://github.com/apple/swift-openapi-generator.git", exact: "$version")],
    targets: []
)
MANIFEST
swift build -c release --package-path "$tool_package" --product swift-openapi-generator >&2
generator="$(swift build -c release --package-path "$tool_package" --show-bin-path)/swift-openapi-generator"
output=$(mktemp -d)
trap 'rm -rf "$output"' EXIT
"$generator" generate docs/customer-api.yaml --config scripts/openapi-generator-config.yaml --output-directory "$output"
rm -rf Sources/CustomerAPI/Generated
mkdir -p Sources/CustomerAPI/Generated
cp "$output"/*.swift Sources/CustomerAPI/Generated/
ls Sources/CustomerAPI/Generated
