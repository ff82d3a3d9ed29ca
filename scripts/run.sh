#!/usr/bin/env bash
# The README's first command: the whole pipeline on this machine, fed a demo stream.
#
#   scripts/run.sh          install what is missing, build, start PostgreSQL and the broker (scripts/services.sh),
#                           migrate, ensure the topics, start ingest and two workers, send the demo stream, print
#                           the entitlements and the dead letters, re-drive the dead letters after configuring the
#                           second app, deliver the entitlement events to a webhook receiver that verifies their
#                           signatures, post a purchase to the customer API and read the customer back before
#                           Apple's notification arrives, stop ingest while a fake App Store keeps sending and recover what it
#                           missed with `pipelinectl backfill`, check every hop with `pipelinectl test-notification`,
#                           then keep running (Ctrl-C stops everything; without a terminal, or with
#                           RUN_DETACH=1, it returns and leaves the stack running)
#   scripts/run.sh stop     stop ingest, the workers and the services (their data is deleted)
#   scripts/run.sh status   what runs where
#
# Each run starts from empty services. The demo's workers trust a freshly minted test root in addition to
# Apple's; nothing but this demo ever does (TRUSTED_ROOTS defaults to `apple`).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
stack="$root/.services/stack"
log() { printf '\n== %s\n' "$*"; }

# The demo's apps: the one configured from the start, and the one that is added later (its notification is
# dead-lettered until then). Both use the minter's App Apple ID.
app="com.example.pipeline.app:1234567890"
later_app="com.example.pipeline.later:1234567890"
ingest_port=${RUN_INGEST_PORT:-8080}
partitions=4
worker_ports=(${RUN_WORKER_PORTS:-8081 8082})

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
port_free() { python3 -c "import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', int(sys.argv[1]))); s.close()" "$1" 2>/dev/null; }

stop_processes() {
    local pids=()
    for file in "$stack"/*.pid; do
        [[ -f $file ]] && alive "$file" && { pids+=("$(cat "$file")"); kill -TERM "$(cat "$file")"; }
        rm -f "$file"
    done
    for _ in $(seq 300); do  # graceful: workers commit what is durable and leave the group
        local running=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
        ((running)) || break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

stop_all() {
    stop_processes
    scripts/services.sh down
    echo "stopped"
}

case "${1:-}" in
stop) stop_all; exit 0 ;;
status)
    for file in "$stack"/*.pid; do [[ -f $file ]] && { alive "$file" && echo "$(basename "$file" .pid): running (pid $(cat "$file"))" || echo "$(basename "$file" .pid): not running"; }; done
    scripts/services.sh status
    exit 0 ;;
"") ;;
*) echo "usage: $0 [stop|status]" >&2; exit 2 ;;
esac

scripts/install.sh
log "build"
swift build --product ingest 2>&1 | tail -1
swift build --product worker 2>&1 | tail -1
swift build --product pipelinectl 2>&1 | tail -1
swift build --product demo-notifications 2>&1 | tail -1
swift build --product fake-appstore-api 2>&1 | tail -1
swift build --product customer-api 2>&1 | tail -1
swift build --product webhooks 2>&1 | tail -1
swift build --product console 2>&1 | tail -1
bin=$(swift build --show-bin-path)

log "services (fresh PostgreSQL and Kafka-protocol broker on loopback)"
stop_processes
scripts/services.sh down >/dev/null 2>&1 || true
# An assignment, not `eval "$(…)"`: a service that did not start stops this script here, with its reason.
services_env=$(scripts/services.sh up) || { echo "the services did not start (reason above)" >&2; exit 1; }
eval "$services_env"
mkdir -p "$stack"
export NOTIFICATIONS_TOPIC=appstore.notifications.v2 WORKER_GROUP_ID=appstore-worker LOG_LEVEL=${LOG_LEVEL:-notice}
port_free "$ingest_port" || ingest_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for i in "${!worker_ports[@]}"; do
    port_free "${worker_ports[$i]}" || worker_ports[$i]=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
done

log "pipelinectl migrate; pipelinectl topics ensure; the erasure key (docs/privacy.md)"
# Made once per demo stack and read by every service that erases or applies records.
"$bin/pipelinectl" customers erasure-key --file "$stack/erasure.key" --create-if-missing
export ERASURE_KEY_FILE=$stack/erasure.key
"$bin/pipelinectl" migrate
"$bin/pipelinectl" topics ensure --partitions "$partitions" --replication-factor 1

start_worker() {  # number apps
    local number=$1 apps=$2
    APPS=$apps TRUSTED_ROOTS="apple,$stack/demo-root.pem,$stack/fake-apple-root.pem" WORKER_MIGRATE=false WORKER_OPS_HOST=127.0.0.1 \
        WORKER_OPS_PORT=${worker_ports[$((number - 1))]} KAFKA_CLIENT_ID=worker-$number \
        KAFKA_CONFIG_SESSION_TIMEOUT_MS=6000 KAFKA_CONFIG_HEARTBEAT_INTERVAL_MS=500 KAFKA_CONFIG_AUTO_COMMIT_INTERVAL_MS=500 \
        nohup "$bin/worker" >>"$stack/worker-$number.log" 2>&1 &
    echo $! >"$stack/worker-$number.pid"
}
wait_ready() {  # url
    for _ in $(seq 300); do curl -fsS "$1" >/dev/null 2>&1 && return; sleep 0.1; done
    echo "not ready: $1 (logs in $stack)"; exit 1
}
assigned() {  # port → the partitions that worker owns (worker_assigned_partitions)
    curl -fsS "http://127.0.0.1:$1/metrics" 2>/dev/null | awk '$1 == "worker_assigned_partitions" { printf "%d", $2; found = 1 } END { if (!found) printf "0" }'
}
wait_settled() {  # ports… : together they own all $partitions partitions, each some. A rolling restart waits for
    # this between steps: stopping a member while the group still rebalances leaves the tansu broker's group stuck
    # with a departed leader (Kafka would expire it after its session timeout; tansu never does).
    for _ in $(seq 600); do
        local total=0 each=1
        for port in "$@"; do
            local count; count=$(assigned "$port")
            total=$((total + count)); ((count > 0)) || each=0
        done
        ((total == partitions && each)) && return
        sleep 0.1
    done
    echo "the group did not settle in 60 s (logs in $stack)"; exit 1
}
wait_drained() {  # the group has committed everything produced so far
    local deadline=$((SECONDS + 120))
    while ((SECONDS < deadline)); do
        if "$bin/pipelinectl" lag --json 2>/dev/null | python3 -c '
import json, sys
lag = json.load(sys.stdin)
sys.exit(0 if lag["totalLag"] == 0 and all(p["committed"] is not None for p in lag["partitions"] if p["end"] > 0) else 1)'; then return; fi
        sleep 0.5
    done
    echo "the workers did not catch up in 2 minutes (logs in $stack)"; exit 1
}

log "ingest on :$ingest_port, workers on :${worker_ports[*]} (ops)"
"$bin/demo-notifications" "$stack/demo-root.pem" 20 "$stack/demo-purchase.json" >"$stack/demo-bodies.jsonl"
start_ingest() {
    INGEST_HOST=127.0.0.1 INGEST_PORT=$ingest_port nohup "$bin/ingest" >>"$stack/ingest.log" 2>&1 &
    echo $! >"$stack/ingest.pid"
}
start_ingest
# The demo's Apple: a fake App Store Server API that mints its own API key and signing root for this run only.
apple_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rm -f "$stack/fake-apple-root.pem"  # the wait below must see this run's root, not the last run's
nohup "$bin/fake-appstore-api" "$apple_port" "$stack/demo-appstore-key.p8" "$stack/fake-apple-root.pem" "${app%%:*}" \
    "http://127.0.0.1:$ingest_port/v2/notifications" >>"$stack/fake-appstore-api.log" 2>&1 &
echo $! >"$stack/fake-appstore-api.pid"
for _ in $(seq 300); do [[ -s $stack/fake-apple-root.pem ]] && break; sleep 0.1; done
start_worker 1 "$app"
start_worker 2 "$app"
wait_ready "http://127.0.0.1:$ingest_port/health/ready"
for port in "${worker_ports[@]}"; do wait_ready "http://127.0.0.1:$port/health/ready"; done
wait_settled "${worker_ports[@]}"
echo "ready: APPS=$app, TRUSTED_ROOTS=apple + the demo's test root"

log "webhooks: a receiver on loopback (scripts/webhook-receiver.py verifies every signature), registered with pipelinectl webhooks add"
receiver_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
webhooks_ops=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
webhook=$(WEBHOOKS_ALLOW_PRIVATE_TARGETS=true "$bin/pipelinectl" webhooks add --url "http://127.0.0.1:$receiver_port/appstore" --allow-http \
    --description "the demo's receiver" --json)
webhook_id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$webhook")
echo "pipelinectl webhooks add --url http://127.0.0.1:$receiver_port/appstore --allow-http → $webhook_id (its whsec_ secret is printed once, here kept for the receiver)"
WEBHOOK_SECRET=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["secret"])' "$webhook") \
    nohup python3 scripts/webhook-receiver.py "$receiver_port" "$stack/webhook-receiver.log" >>"$stack/webhook-receiver.err" 2>&1 &
echo $! >"$stack/webhook-receiver.pid"
WEBHOOKS_OPS_HOST=127.0.0.1 WEBHOOKS_OPS_PORT=$webhooks_ops WEBHOOKS_GROUP_ID=appstore-webhooks WEBHOOKS_ALLOW_PRIVATE_TARGETS=true \
    nohup "$bin/webhooks" >>"$stack/webhooks.log" 2>&1 &
echo $! >"$stack/webhooks.pid"
wait_ready "http://127.0.0.1:$webhooks_ops/health/ready"

log "POST the demo stream to http://127.0.0.1:$ingest_port/v2/notifications"
python3 - "$ingest_port" "$stack/demo-bodies.jsonl" <<'PY'
import collections, json, sys, urllib.request, urllib.error
port, path = sys.argv[1], sys.argv[2]
statuses, reasons = collections.Counter(), []
for body in open(path):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/notifications", data=body.strip().encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            statuses[response.status] += 1
    except urllib.error.HTTPError as error:
        statuses[error.code] += 1
        reasons.append(f"{error.code} {error.read().decode()[:160]}")
print("responses: " + ", ".join(f"{count} × {status}" for status, count in sorted(statuses.items())))
for reason in reasons: print("  " + reason)
PY
wait_drained

log "pipelinectl entitlements --all"
"$bin/pipelinectl" entitlements --all
log "pipelinectl metrics: subscription metrics from our own rows (docs/metrics.md; the demo's notifications span the last 70 days)"
metrics_from=$(date -u -d '-80 days' +%Y-%m-%d); metrics_to=$(date -u +%Y-%m-%d)
"$bin/pipelinectl" metrics active-subscriptions --from "$metrics_from" --to "$metrics_to" --bucket week
"$bin/pipelinectl" metrics mrr --from "$metrics_from" --to "$metrics_to" --bucket month
"$bin/pipelinectl" metrics churn --from "$metrics_from" --to "$metrics_to" --bucket month
log "pipelinectl dlq list"
"$bin/pipelinectl" dlq list --limit 0
log "entitlement events (the CloudEvents topic app backends read): one subscription's story, then the count by type"
for _ in $(seq 100); do  # the relay publishes the outbox within a round or two of the last batch
    [[ $("$PIPELINE_PG_BIN/psql" "$POSTGRES_URL" -qAtc "SELECT count(*) FROM entitlement_events_outbox WHERE published_at IS NULL") == 0 ]] && break
    sleep 0.2
done
events_subject=$("$bin/pipelinectl" events tail --json --type entitlement.revoked | python3 -c 'import json,sys; lines=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print(lines[0]["subject"] if lines else "")')
[[ -n $events_subject ]] && "$bin/pipelinectl" events tail --original-transaction-id "$events_subject"
"$bin/pipelinectl" events tail --json | python3 -c 'import collections,json,sys; c=collections.Counter(json.loads(l)["type"] for l in sys.stdin if l.startswith("{")); print("events by type: " + ", ".join(f"{t} {n}" for t, n in sorted(c.items())))'

log "webhook deliveries: the receiver verified each signature (first lines of its log), and the delivery log"
for _ in $(seq 150); do  # until every published event reached the receiver
    published=$("$PIPELINE_PG_BIN/psql" "$POSTGRES_URL" -qAtc "SELECT count(*) FROM entitlement_events_outbox")
    [[ $(grep -c '^verified' "$stack/webhook-receiver.log" 2>/dev/null) -ge $published ]] && break
    sleep 0.2
done
head -8 "$stack/webhook-receiver.log"
echo "… $(grep -c '^verified' "$stack/webhook-receiver.log") deliveries verified, $(grep -c '^REFUSED' "$stack/webhook-receiver.log") refused; $published events published"
"$bin/pipelinectl" webhooks deliveries --endpoint "$webhook_id" --limit 3

log "the customer API: the app's backend posts a purchase and reads the customer back before Apple's notification arrives"
customer_api_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
customer_api_ops=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
APPS=$app TRUSTED_ROOTS="apple,$stack/demo-root.pem" CUSTOMER_API_HOST=127.0.0.1 CUSTOMER_API_PORT=$customer_api_port \
    CUSTOMER_API_OPS_PORT=$customer_api_ops nohup "$bin/customer-api" >>"$stack/customer-api.log" 2>&1 &
echo $! >"$stack/customer-api.pid"
wait_ready "http://127.0.0.1:$customer_api_ops/health/ready"
api_key=$("$bin/pipelinectl" api-keys create --name demo-backend --scope write --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
echo "pipelinectl api-keys create --name demo-backend --scope write   (the key is shown once; PostgreSQL keeps its hash)"
python3 - "$customer_api_port" "$api_key" "$stack/demo-purchase.json" "${app%%:*}" <<'PY'
import json, sys, urllib.request
port, key, path, bundle = sys.argv[1:5]
purchase = json.load(open(path))
def call(method, route, body=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{route}", method=method, data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, json.load(response)
status, answer = call("POST", f"/v1/apps/{bundle}/purchases", {k: purchase[k] for k in ("customerId", "signedTransaction", "signedRenewalInfo")})
subscription = answer["customer"]["subscriptions"][0]
print(f"POST /v1/apps/{bundle}/purchases → {status}, ownership {answer['purchase']['ownership']}; "
      f"{subscription['originalTransactionId']}: {subscription['status']}, isActive {subscription['isActive']}, expires {subscription['expiresAt']}, event sequence {subscription['sequence']}")
status, customer = call("GET", f"/v1/apps/{bundle}/customers/{purchase['customerId']}")
print(f"GET  /v1/apps/{bundle}/customers/{purchase['customerId']} → {status}, hasActiveAccess {customer['hasActiveAccess']}, {len(customer['subscriptions'])} subscription")
PY
curl -fsS -o /dev/null -w "Apple's SUBSCRIBED for the same transaction, POSTed to ingest → %{http_code}\n" -H 'Content-Type: application/json' \
    --data-binary "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["notificationBody"])' "$stack/demo-purchase.json")" \
    "http://127.0.0.1:$ingest_port/v2/notifications"
wait_drained
sleep 1  # one relay round
echo "after the notification (no second grant, no new event):"
"$bin/pipelinectl" events tail --original-transaction-id 2000000777000001

log "configure the second app (APPS += $later_app), restart the workers one by one, re-drive the dead letters"
for number in 1 2; do
    other=${worker_ports[$((2 - number))]} own=${worker_ports[$((number - 1))]}
    kill -TERM "$(cat "$stack/worker-$number.pid")"
    while kill -0 "$(cat "$stack/worker-$number.pid")" 2>/dev/null; do sleep 0.1; done
    wait_settled "$other"  # the other worker took over every partition
    start_worker "$number" "$app,$later_app"
    wait_ready "http://127.0.0.1:$own/health/ready"
    wait_settled "$other" "$own"  # and gave some to the new one
    echo "worker-$number restarted; partitions: $(assigned "$other") on :$other, $(assigned "$own") on :$own"
done
"$bin/pipelinectl" dlq redrive
wait_drained
echo "after the re-drive: the forged ones are dead-lettered again (redrive-count 1), the second app's notification is stored"
"$bin/pipelinectl" dlq list --limit 0
"$bin/pipelinectl" entitlements --all | grep -E "^ENVIRONMENT|com.example.pipeline.later"

log "Apple's side: ingest stops while the (fake) App Store keeps sending; pipelinectl backfill recovers what was missed"
export APPSTORE_KEY_ID=DEMOKEY001 APPSTORE_ISSUER_ID=00000000-demo-4000-8000-000000000001 \
    APPSTORE_PRIVATE_KEY_FILE="$stack/demo-appstore-key.p8" APPSTORE_API_BASE_URL="http://127.0.0.1:$apple_port"
ledger() { "$PIPELINE_PG_BIN/psql" "$POSTGRES_URL" -qAtc "SELECT count(*) FROM notification_ledger"; }
apple_sends() { curl -fsS -X POST "http://127.0.0.1:$apple_port/fake/send?subscriptions=4&first=$1"; }
echo "Apple sends 4 subscriptions' notifications, ingest up:   $(apple_sends 500)"
kill -TERM "$(cat "$stack/ingest.pid")"
while alive "$stack/ingest.pid"; do sleep 0.1; done
echo "Apple sends 4 more, ingest stopped:                      $(apple_sends 600)"
start_ingest
wait_ready "http://127.0.0.1:$ingest_port/health/ready"
echo "Apple sends 4 more, ingest back:                         $(apple_sends 700)"
wait_drained
before=$(ledger)
echo "the ledger holds $before notifications; the ones sent during the outage are missing"
"$bin/pipelinectl" backfill --bundle-id "${app%%:*}" --environment Production --since 1h --only-failures
wait_drained
echo "the ledger holds $(ledger) notifications after the backfill ($(( $(ledger) - before )) recovered)"
log "the operator console: a customer's whole story (timeline with each notification's outcome and deliveries), dead letters, actions"
console_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
console_ops=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
APPS=$app TRUSTED_ROOTS="apple,$stack/demo-root.pem" CONSOLE_HOST=127.0.0.1 CONSOLE_PORT=$console_port CONSOLE_OPS_PORT=$console_ops \
    CONSOLE_ALLOW_HTTP=true nohup "$bin/console" >>"$stack/console.log" 2>&1 &
echo $! >"$stack/console.pid"
wait_ready "http://127.0.0.1:$console_ops/health/ready"
console_password=$("$bin/pipelinectl" operators add --email demo@example.com --role support --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["password"])')
echo "pipelinectl operators add --email demo@example.com --role support   (the one-time password is shown once; PostgreSQL keeps its bcrypt hash)"
echo "console: http://127.0.0.1:$console_port/   sign in as demo@example.com with $console_password"

log "pipelinectl test-notification: Apple → ingest → Kafka → worker → PostgreSQL in one command"
"$bin/pipelinectl" test-notification --bundle-id "${app%%:*}" --environment Production --timeout 60s

cat <<EOF

== the pipeline is running
  ingest        http://127.0.0.1:$ingest_port/v2/notifications   (health: /health/ready, metrics: /metrics)
  workers       $(for port in "${worker_ports[@]}"; do printf 'http://127.0.0.1:%s/metrics  ' "$port"; done)
  PostgreSQL    $POSTGRES_URL
  Kafka         $KAFKA_BOOTSTRAP_SERVERS   (topic $NOTIFICATIONS_TOPIC, dead letters $NOTIFICATIONS_TOPIC.dead-letter)
  webhooks      endpoint $webhook_id → http://127.0.0.1:$receiver_port/appstore (log $stack/webhook-receiver.log; ops :$webhooks_ops; docs/webhooks.md)
  customer API  http://127.0.0.1:$customer_api_port/v1/apps/${app%%:*}/customers/{customerId}   (Bearer key: pipelinectl api-keys create; docs/customer-api.md; ops :$customer_api_ops)
  console       http://127.0.0.1:$console_port/   (demo@example.com, one-time password $console_password; docs/console.md; ops :$console_ops)
  fake Apple    http://127.0.0.1:$apple_port   (App Store Server API; APPSTORE_* as exported above, key in $stack)
  logs          $stack/*.log
  events        $bin/pipelinectl events tail --follow     (topic appstore.entitlement-events.v1, docs/events.md)
  erasure       $bin/pipelinectl customers erase --customer-id ID --bundle-id ${app%%:*} --reason R   (key $stack/erasure.key; docs/privacy.md)
  operate       eval "\$(scripts/services.sh env)"; $bin/pipelinectl --help     (lag, replay, dlq, entitlements, events, backfill, test-notification)
  stop          scripts/run.sh stop$( [[ -t 0 && -z ${RUN_DETACH:-} ]] && echo "   (or Ctrl-C here)")
EOF

if [[ -t 0 && -z ${RUN_DETACH:-} ]]; then
    trap 'echo; stop_all; exit 0' INT TERM
    while alive "$stack/ingest.pid"; do sleep 1; done
    echo "ingest exited (see $stack/ingest.log)"
    stop_all
fi
