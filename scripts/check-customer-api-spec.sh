#!/usr/bin/env bash
# Holds the running customer API to its contract, docs/customer-api.yaml: schemathesis (PyPI, in .venv) generates
# requests from the spec, valid and invalid, and checks every answer: no 5xx, only documented statuses, bodies and
# headers valid against the spec. Bounded (examples per operation, a fixed seed), so it runs in every .ci/run.
#
#   scripts/check-customer-api-spec.sh            # needs KAFKA_BOOTSTRAP_SERVERS and POSTGRES_URL (scripts/services.sh up)
#   CUSTOMER_API_SPEC_EXAMPLES=200 scripts/check-customer-api-spec.sh
#
# It uses a database and a topic of its own, a built customer-api and pipelinectl (.build/debug), and stops what it
# started on every exit path.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${KAFKA_BOOTSTRAP_SERVERS:?run scripts/services.sh up first}" "${POSTGRES_URL:?run scripts/services.sh up first}"
bin=.build/debug
examples=${CUSTOMER_API_SPEC_EXAMPLES:-25}
for tool in "$bin/customer-api" "$bin/pipelinectl" .venv/bin/schemathesis; do
    [[ -x $tool ]] || { echo "missing $tool (scripts/install.sh, swift build)" >&2; exit 1; }
done

suffix="$$$(date +%s)"
database="spec_$suffix"
work=$(mktemp -d)
api_pid=
cleanup() {
    local status=$?
    [[ -n $api_pid ]] && kill "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null || true
    psql -q "$POSTGRES_URL" -c "DROP DATABASE IF EXISTS $database" >/dev/null 2>&1 || true
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT

psql -q "$POSTGRES_URL" -c "CREATE DATABASE $database" >/dev/null
export POSTGRES_URL="${POSTGRES_URL%/*}/$database"
export NOTIFICATIONS_TOPIC="spec-notifications-$suffix" EVENTS_TOPIC="spec-events-$suffix" DEAD_LETTER_TOPIC="spec-notifications-$suffix.dead-letter"
export APPS=com.example.pipeline.app:1234567890 TRUSTED_ROOTS=apple TOPIC_PARTITIONS=1 LOG_LEVEL=warning
"$bin/pipelinectl" migrate >/dev/null
"$bin/pipelinectl" topics ensure >/dev/null
key=$("$bin/pipelinectl" api-keys create --name spec-check --scope write --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ops=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
CUSTOMER_API_HOST=127.0.0.1 CUSTOMER_API_PORT=$port CUSTOMER_API_OPS_PORT=$ops CUSTOMER_API_APPLY_TIMEOUT_MS=500 \
    "$bin/customer-api" 2>"$work/customer-api.log" &
api_pid=$!
for _ in $(seq 1 200); do
    curl -fsS "http://127.0.0.1:$ops/health/ready" >/dev/null 2>&1 && break
    kill -0 "$api_pid" 2>/dev/null || { echo "customer-api exited:" >&2; tail -20 "$work/customer-api.log" >&2; exit 1; }
    sleep 0.1
done
curl -fsS "http://127.0.0.1:$ops/health/ready" >/dev/null || { echo "customer-api never became ready:" >&2; tail -20 "$work/customer-api.log" >&2; exit 1; }

# The app's bundle id in every path (random ones would only meet 403 unknown_app); every other value generated.
cat >"$work/schemathesis.toml" <<EOF
[parameters]
"path.bundleId" = "com.example.pipeline.app"
EOF
echo "schemathesis: $examples examples per operation against customer-api on :$port"
status=0
.venv/bin/schemathesis --config-file "$work/schemathesis.toml" run docs/customer-api.yaml \
    --url "http://127.0.0.1:$port" --header "Authorization: Bearer $key" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
    --max-examples "$examples" --seed 20261125 --workers 2 --request-timeout 10 --no-color --generation-database none \
    >"$work/report.txt" 2>&1 || status=$?
tail -40 "$work/report.txt"
if ((status != 0)); then
    echo "schemathesis found answers outside docs/customer-api.yaml (above); customer-api's log:" >&2
    grep -v '^\s*$' "$work/customer-api.log" | tail -20 >&2 || true
    exit "$status"
fi
