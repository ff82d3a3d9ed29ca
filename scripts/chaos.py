#!/usr/bin/env python3
"""The chaos run: the whole pipeline under combined faults at random moments, checked end to end (docs/chaos.md).

    .venv/bin/python3 scripts/chaos.py [--notifications 20000] [--seed 1] [--faults 24] [--duration 150] [--bin DIR]
        [--broker-losses fail|discount]   (discount on the bundled tansu: see docs/chaos.md)

Independent of pipelinectl's own checks: it starts its own PostgreSQL cluster, its own tansu broker (storing into
scripts/object-store.py, a small S3 of our own, so a restart keeps topics, records and group offsets), ingest, two workers (each with its events
relay), the webhooks service and a webhook receiver, all on loopback. It mints lifecycles (scripts' demo minter:
a test root made for this run), adds 10 % duplicates and 1 % forged copies, and POSTs them to ingest from
concurrent senders, retrying every non-200 and every broken connection as Apple does, until each got a 200. While
they send, at seeded random moments and overlapping, it kills ingest (-9) and restarts it, kills workers (-9),
restarts the broker from its stored state, restarts PostgreSQL (immediate shutdown), pauses a worker past its
session timeout (SIGSTOP, then SIGCONT) and kills the webhooks service (-9). The same stream, first sent once
with no fault, is the reference.

At the end it checks, and exits 1 with the first differing rows on any violation:
  1. every body that got a 200 is in the archive (genuine) or the dead-letter topic (forged); a body that got a 200
     but is not even in the notifications topic is reported apart, as the broker's loss (see docs/operations.md);
     with `--broker-losses discount` such a loss is reported but does not fail the run: the checks below then hold
     the pipeline to an undisturbed run of the stream without the lost records (and the forged set without them);
  2. the database digest (archive content, transactions, entitlements) equals the undisturbed run's;
  3. the dead-letter topic holds exactly the forged bodies, one letter per record of them in the notifications
     topic (after deduplication by original position, as `pipelinectl dlq list` does), and nothing else;
  4. the events topic, deduplicated by ce_id, is exactly the outbox, and each subscription's sequence runs 1…n
     without a gap; an event the relay marked published (only on an acknowledgement with an offset) that the topic
     does not hold is the broker's loss, reported and, with `--broker-losses discount`, discounted;
  5. every event the topic holds reached the webhook receiver with a valid Standard Webhooks signature.
It prints the faults injected, notifications, 200s, retries and time. A seed makes the stream's shape and the
fault schedule repeatable (the signatures differ: each run mints a new root).
"""
import argparse, base64, collections, hashlib, hmac, http.client, json, os, random, shutil, signal, socket, subprocess, sys, tempfile, threading, time, uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = "com.example.pipeline.app:1234567890"
PARTITIONS = 4
SESSION_TIMEOUT_MS = 6000
FAULT_KINDS = ["ingest-kill", "worker-kill", "broker-restart", "postgres-restart", "worker-pause", "webhooks-kill"]


def log(message):
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(condition, timeout, what, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise ChaosSetupError(f"{what} (waited {timeout} s)")


class ChaosSetupError(Exception):
    pass


class Process:
    """One of the pipeline's processes (or a service), restartable with the same command and environment."""

    def __init__(self, name, command, env, log_path, port=None):
        self.name, self.command, self.env, self.log_path, self.port = name, command, env, log_path, port
        self.popen = None
        self.lock = threading.Lock()  # one fault at a time per process

    def start(self, wait=True):
        log_file = open(self.log_path, "ab")
        # The test runner's SIGTERM disposition is inherited by children: start them with default handlers.
        self.popen = subprocess.Popen(self.command, env=self.env, stdout=log_file, stderr=log_file, stdin=subprocess.DEVNULL,
                                      preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
        log_file.close()
        if wait and self.port:
            wait_until(lambda: listening(self.port) or self.popen.poll() is not None, 60, f"{self.name} did not listen on {self.port}")
            if self.popen.poll() is not None:
                raise ChaosSetupError(f"{self.name} exited with {self.popen.returncode} at start (log {self.log_path})")

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def kill(self):
        if self.alive():
            self.popen.send_signal(signal.SIGCONT)
            self.popen.kill()
        if self.popen is not None:
            self.popen.wait()

    def terminate(self, timeout=30):
        if not self.alive():
            return
        self.popen.send_signal(signal.SIGCONT)
        self.popen.terminate()
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


class Postgres:
    """A cluster of the chaos run's own (run as the postgres user when we are root), stopped as a crash would."""

    def __init__(self, pg_bin, directory):
        self.bin, self.dir, self.port = pg_bin, directory, free_port()

    def run(self, *arguments, check=True):
        command = list(arguments)
        if os.getuid() == 0:
            command = ["runuser", "-u", "postgres", "--"] + command
        return subprocess.run(command, check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/", text=True)

    def start(self):
        if not os.path.exists(self.dir + "/data/PG_VERSION"):
            self.run("mkdir", "-p", self.dir + "/data", self.dir + "/sockets")
            self.run(self.bin + "/initdb", "-D", self.dir + "/data", "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
        self.run(self.bin + "/pg_ctl", "-D", self.dir + "/data", "-l", self.dir + "/log", "-w", "-o",
                 f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.dir}/sockets -c fsync=off -c max_connections=200",
                 "start")

    def crash(self):
        self.run(self.bin + "/pg_ctl", "-D", self.dir + "/data", "-m", "immediate", "stop", check=False)

    def url(self, database="postgres"):
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def sql(self, database, statement):
        result = subprocess.run([self.bin + "/psql", self.url(database), "-qAtX", "-v", "ON_ERROR_STOP=1", "-c", statement],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            raise ChaosSetupError(f"psql: {result.stderr.strip()}")
        return result.stdout

    def destroy(self):
        self.crash()
        self.run("rm", "-rf", self.dir, check=False)


class Broker:
    """tansu. Persistent: storing into an S3 object store of its own (scripts/object-store.py), so a kill -9 and a
    restart keep what was acknowledged (what tansu 0.6 does not keep, the first check tells). Else in memory (the
    reference's)."""

    def __init__(self, tansu, object_store, workdir, persistent=True):
        self.port, self.store_port, self.persistent = free_port(), free_port(), persistent
        env = dict(os.environ, AWS_ENDPOINT=f"http://127.0.0.1:{self.store_port}", AWS_ALLOW_HTTP="true", AWS_ACCESS_KEY_ID="test",
                   AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1")
        name = "tansu" if persistent else "tansu-memory"
        self.store = Process("object-store", [object_store, "-p", str(self.store_port)], dict(os.environ), f"{workdir}/object-store.log",
                             self.store_port)
        self.broker = Process(name, [tansu, "broker", "--listener-url", f"tcp://127.0.0.1:{self.port}", "--advertised-listener-url",
                                     f"tcp://127.0.0.1:{self.port}", "--storage-engine", "s3://tansu/" if persistent else "memory://tansu/"],
                              env, f"{workdir}/{name}.log", self.port)

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        if self.persistent and not self.store.alive():
            self.store.start()
            connection = http.client.HTTPConnection("127.0.0.1", self.store_port, timeout=10)
            connection.request("PUT", "/tansu")
            connection.getresponse().read()
        self.broker.start()

    def kill(self):
        self.broker.kill()
        self.store.kill()


class Receiver:
    """The webhook endpoint: verifies each delivery's Standard Webhooks signature and records the event ids."""

    def __init__(self):
        self.port, self.secret = free_port(), None
        self.delivered, self.refused = set(), 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                message_id, timestamp = self.headers.get("webhook-id", ""), self.headers.get("webhook-timestamp", "0")
                expected = base64.b64encode(hmac.new(receiver.secret, f"{message_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()).decode()
                ok = any(hmac.compare_digest(entry.removeprefix("v1,"), expected) for entry in self.headers.get("webhook-signature", "").split())
                self.send_response(200 if ok else 401)
                self.end_headers()
                with receiver.lock:
                    if ok:
                        receiver.delivered.add(json.loads(body)["id"])
                    else:
                        receiver.refused += 1

            def log_message(self, *arguments):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Stack:
    """One pipeline (topics, database, ingest, workers, webhooks) on the shared broker and cluster."""

    def __init__(self, name, args, bin_dir, workdir, postgres, broker, root_pem, receiver=None):
        self.name, self.args, self.bin, self.workdir, self.postgres, self.broker, self.receiver = name, args, bin_dir, workdir, postgres, broker, receiver
        self.topic = f"chaos-{args.seed}-{name}-{uuid.uuid4().hex[:6]}"
        self.events_topic, self.dead_letter_topic = self.topic + ".events", self.topic + ".dead-letter"
        self.database = f"chaos_{name}"
        self.group = self.topic + "-workers"
        self.base_env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap, POSTGRES_URL=postgres.url(self.database),
                             NOTIFICATIONS_TOPIC=self.topic, EVENTS_TOPIC=self.events_topic, DEAD_LETTER_TOPIC=self.dead_letter_topic,
                             WORKER_GROUP_ID=self.group, APPS=APP, TRUSTED_ROOTS=f"apple,{root_pem}", LOG_LEVEL="notice",
                             WEBHOOKS_ALLOW_PRIVATE_TARGETS="true", WEBHOOKS_GROUP_ID=self.topic + "-webhooks")
        self.ingest_port = free_port()
        self.ingest = Process(f"{name}/ingest", [f"{bin_dir}/ingest"],
                              dict(self.base_env, INGEST_HOST="127.0.0.1", INGEST_PORT=str(self.ingest_port), INGEST_SHUTDOWN_DRAIN_MS="0"),
                              f"{workdir}/{name}-ingest.log", self.ingest_port)
        self.workers = []
        for number in (1, 2):
            port = free_port()
            self.workers.append(Process(f"{name}/worker-{number}", [f"{bin_dir}/worker"], dict(
                self.base_env, WORKER_MIGRATE="false", WORKER_OPS_HOST="127.0.0.1", WORKER_OPS_PORT=str(port), KAFKA_CLIENT_ID=f"worker-{number}",
                KAFKA_CONFIG_SESSION_TIMEOUT_MS=str(SESSION_TIMEOUT_MS), KAFKA_CONFIG_HEARTBEAT_INTERVAL_MS="500",
                KAFKA_CONFIG_AUTO_COMMIT_INTERVAL_MS="500"), f"{workdir}/{name}-worker-{number}.log", port))
        self.webhooks = None
        if receiver:
            port = free_port()
            self.webhooks = Process(f"{name}/webhooks", [f"{bin_dir}/webhooks"], dict(
                self.base_env, WEBHOOKS_OPS_HOST="127.0.0.1", WEBHOOKS_OPS_PORT=str(port), KAFKA_CONFIG_SESSION_TIMEOUT_MS=str(SESSION_TIMEOUT_MS),
                KAFKA_CONFIG_HEARTBEAT_INTERVAL_MS="500", LOG_LEVEL="info"),
                                    f"{workdir}/{name}-webhooks.log", port)

    def processes(self):
        return [self.ingest] + self.workers + ([self.webhooks] if self.webhooks else [])

    def pipelinectl(self, *arguments):
        result = subprocess.run([f"{self.bin}/pipelinectl", *arguments], env=self.base_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            raise ChaosSetupError(f"pipelinectl {' '.join(arguments)}: {result.stderr.strip()[-400:]}")
        return result.stdout

    def start(self):
        self.postgres.sql("postgres", f"CREATE DATABASE {self.database}")
        self.pipelinectl("migrate")
        self.pipelinectl("topics", "ensure", "--partitions", str(PARTITIONS), "--replication-factor", "1")
        if self.receiver:
            answer = json.loads(self.pipelinectl("webhooks", "add", "--url", f"http://127.0.0.1:{self.receiver.port}/hook", "--allow-http", "--json"))
            self.receiver.secret = base64.b64decode(answer["secret"].removeprefix("whsec_"))
        for process in self.processes():
            process.start()

    def stop(self):
        for process in self.processes():
            process.terminate(timeout=15)

    def lag(self):
        try:
            answer = json.loads(self.pipelinectl("lag", "--json"))
        except (ChaosSetupError, ValueError):
            return None
        if any(p["end"] > 0 and p["committed"] is None for p in answer["partitions"]):
            return None
        return answer["totalLag"]

    def wait_drained(self, timeout):
        wait_until(lambda: self.lag() == 0, timeout, f"{self.name}: the workers did not consume everything", interval=1)
        wait_until(lambda: self.postgres.sql(self.database, "SELECT count(*) FROM entitlement_events_outbox WHERE published_at IS NULL").strip() == "0",
                   timeout, f"{self.name}: the outbox was not published", interval=0.5)

    def digest(self):
        """The archive's content (without storage times and Kafka positions, which differ between runs),
        transactions and entitlements (without update times and event bookkeeping, which depend on arrival order)."""
        parts = {
            "ledger": "SELECT count(*) FROM notification_ledger",
            "archive": "SELECT coalesce(md5(string_agg(x, '|' ORDER BY x)), '') FROM (SELECT (to_jsonb(n) - 'stored_at' - 'received_at' - 'kafka_topic'"
                       " - 'kafka_partition' - 'kafka_offset')::text AS x FROM notifications n) s",
            "transactions": "SELECT coalesce(md5(string_agg(x, '|' ORDER BY x)), '') FROM (SELECT to_jsonb(t)::text AS x FROM transactions t) s",
            "entitlements": "SELECT coalesce(md5(string_agg(x, '|' ORDER BY x)), '') FROM (SELECT (to_jsonb(e) - 'updated_at' - 'event_sequence'"
                            " - 'last_event_after')::text AS x FROM entitlements e) s",
        }
        return {name: self.postgres.sql(self.database, statement).strip() for name, statement in parts.items()}

    def rows(self, table, exclude):
        statement = f"SELECT (to_jsonb(r) {''.join(f' - {name!r}' for name in exclude)})::text FROM {table} r ORDER BY 1"
        return self.postgres.sql(self.database, statement).splitlines()


def read_topic(bootstrap, topic, idle=5.0):
    """Every record of `topic` (value, headers as a dict, partition, offset). tansu's high watermark can lag what it
    stores (../shared/notes/infra.md), so the end is where the watermark was reached *and* nothing more came for
    `idle` seconds, never the watermark alone."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-reader-" + uuid.uuid4().hex, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        metadata = consumer.list_topics(topic, timeout=20)
        partitions = sorted(metadata.topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records, deadline, last = [], time.monotonic() + 180, time.monotonic()
        remaining = {p for p, end in ends.items() if end > 0}
        while time.monotonic() < deadline and (remaining or time.monotonic() - last < idle):
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            last = time.monotonic()
            headers = {key: (value or b"").decode() for key, value in (message.headers() or [])}
            records.append((message.value() or b"", headers, message.partition(), message.offset()))
            if message.offset() + 1 >= ends[message.partition()]:
                remaining.discard(message.partition())
        if remaining:
            raise ChaosSetupError(f"could not read {topic} up to its high watermark (partitions {sorted(remaining)})")
        return records
    finally:
        consumer.close()


class Sender:
    """Apple's side: concurrent POSTs, each body retried (after a short backoff) until ingest answers 200."""

    def __init__(self, port_of, bodies, concurrency, duration, unsent=()):
        self.port_of, self.bodies, self.concurrency, self.duration = port_of, bodies, concurrency, duration
        self.ok = [False] * len(bodies)
        self.unsent = set(unsent)  # indexes counted as answered 200 without being sent (--self-test-broker-loss)
        self.attempts = collections.Counter()
        self.statuses = collections.Counter()
        self.lock = threading.Lock()
        self.next = 0

    def run(self):
        self.started = time.monotonic()
        threads = [threading.Thread(target=self.loop, args=(number,)) for number in range(self.concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.elapsed = time.monotonic() - self.started

    def loop(self, number):
        rng = random.Random(number)
        connection = None
        while True:
            with self.lock:
                index = self.next
                self.next += 1
            if index >= len(self.bodies):
                break
            # Paced: body k is not sent before k/N of the duration, so the faults land while the stream flows.
            delay = self.started + self.duration * index / len(self.bodies) - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if index in self.unsent:
                self.ok[index] = True
                continue
            while True:
                status = None
                try:
                    if connection is None:
                        connection = http.client.HTTPConnection("127.0.0.1", self.port_of(), timeout=15)
                    connection.request("POST", "/v2/notifications", body=self.bodies[index], headers={"Content-Type": "application/json"})
                    response = connection.getresponse()
                    response.read()
                    status = response.status
                    if response.getheader("connection", "").lower() == "close":
                        connection.close()
                        connection = None
                except (OSError, http.client.HTTPException):
                    status = "connection"
                    if connection is not None:
                        connection.close()
                    connection = None
                with self.lock:
                    self.attempts[index] += 1
                    self.statuses[status] += 1
                if status == 200:
                    self.ok[index] = True
                    break
                time.sleep(rng.uniform(0.1, 0.6))


class Faults:
    """The fault schedule (seeded) and its injection, each fault in a thread of its own so they overlap."""

    def __init__(self, rng, count, duration, stack, broker, postgres):
        self.stack, self.broker, self.postgres = stack, broker, postgres
        kinds = FAULT_KINDS + [rng.choice(FAULT_KINDS) for _ in range(max(0, count - len(FAULT_KINDS)))]
        rng.shuffle(kinds)
        self.schedule = sorted((rng.uniform(0.05, 0.85) * duration, kind, rng.random(), rng.random()) for kind in kinds)
        self.injected = collections.Counter()
        self.log = []
        self.threads = []
        self.errors = []
        self.postgres_lock = threading.Lock()

    def run(self, started):
        for at, kind, draw, length in self.schedule:
            delay = started + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            thread = threading.Thread(target=self.inject, args=(kind, draw, length))
            thread.start()
            self.threads.append(thread)

    def join(self):
        for thread in self.threads:
            thread.join()

    def inject(self, kind, draw, length):
        try:
            down = 0.5 + 2.5 * length
            if kind == "ingest-kill":
                self.bounce(self.stack.ingest, down)
            elif kind == "worker-kill":
                self.bounce(self.stack.workers[int(draw * 2)], down)
            elif kind == "webhooks-kill":
                self.bounce(self.stack.webhooks, down)
            elif kind == "broker-restart":
                with self.broker.broker.lock:
                    self.broker.broker.kill()
                    time.sleep(down)
                    self.broker.broker.start()
            elif kind == "postgres-restart":
                with self.postgres_lock:
                    self.postgres.crash()
                    time.sleep(down)
                    self.postgres.start()
            elif kind == "worker-pause":
                worker = self.stack.workers[int(draw * 2)]
                with worker.lock:
                    if worker.alive():
                        worker.popen.send_signal(signal.SIGSTOP)
                        time.sleep(SESSION_TIMEOUT_MS / 1000 + 1 + 2 * length)
                        worker.popen.send_signal(signal.SIGCONT)
            self.injected[kind] += 1
            self.log.append(f"{time.strftime('%H:%M:%S')} {kind}")
        except Exception as error:  # a fault that could not be injected is reported, never ignored
            self.errors.append(f"{kind}: {error}")

    @staticmethod
    def bounce(process, down):
        with process.lock:
            process.kill()
            time.sleep(down)
            process.start()


def forge(body):
    """A copy with one character in the middle of the signature changed, so the signature no longer verifies (the
    encoding stays canonical: the last character, which carries padding bits, is left alone)."""
    document = json.loads(body)
    header, payload, signature = document["signedPayload"].split(".")
    position = len(signature) // 2
    signature = signature[:position] + ("B" if signature[position] == "A" else "A") + signature[position + 1:]
    return json.dumps({"signedPayload": f"{header}.{payload}.{signature}"})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notifications", type=int, default=20000, help="distinct notifications to mint (before duplicates and forgeries)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", type=int, default=24, help="faults to inject (at least one of each kind)")
    parser.add_argument("--duration", type=float, default=150, help="seconds over which the stream is sent (the faults fall inside)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--bin", default=None, help="where the pipeline's executables are (default: swift build --show-bin-path)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs) after a clean run")
    parser.add_argument("--broker-losses", choices=["fail", "discount"], default="fail",
                        help="what a record the broker acknowledged and then lost does to the run: fail it (default), or report it "
                             "as the broker's and hold the pipeline to an undisturbed run of the stream without the lost records "
                             "(for the bundled tansu, which can lose acknowledged records across a kill -9; docs/chaos.md)")
    parser.add_argument("--self-test-broker-loss", type=int, default=0, metavar="N",
                        help="checks the checks: N genuine bodies sent once are counted as answered 200 in the chaos run without "
                             "being sent, which is how a broker that acknowledged and then lost them looks from outside")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` stops every process this run started
    started = time.monotonic()
    rng = random.Random(args.seed)
    bin_dir = args.bin or subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    for tool in ("ingest", "worker", "webhooks", "pipelinectl", "demo-notifications"):
        if not os.access(f"{bin_dir}/{tool}", os.X_OK):
            sys.exit(f"chaos: {bin_dir}/{tool} is missing: swift build first")
    for variable in ("PIPELINE_PG_BIN", "PIPELINE_TANSU_BIN", "PIPELINE_OBJECT_STORE_BIN"):
        if not os.environ.get(variable):
            sys.exit(f"chaos: {variable} is not set: run under `eval \"$(scripts/services.sh env)\"` (scripts/test.sh does)")

    workdir = tempfile.mkdtemp(prefix="chaos-")
    postgres = Postgres(os.environ["PIPELINE_PG_BIN"], f"/tmp/chaos-pg-{uuid.uuid4().hex[:8]}")
    # The reference on a broker in memory; the chaos run on a persistent one it can restart. Neither shares the
    # other's state.
    reference_broker = Broker(os.environ["PIPELINE_TANSU_BIN"], os.environ["PIPELINE_OBJECT_STORE_BIN"], workdir, persistent=False)
    broker = Broker(os.environ["PIPELINE_TANSU_BIN"], os.environ["PIPELINE_OBJECT_STORE_BIN"], workdir)
    stacks = []
    brokers = [reference_broker, broker]
    violations = []
    try:
        # The stream: minted lifecycles in sending order, 10 % duplicates (Apple's retries), 1 % forged copies.
        subscriptions = max(1, round(args.notifications / 3.6))
        minted = subprocess.run([f"{bin_dir}/demo-notifications", f"{workdir}/root.pem", str(subscriptions), "--plain"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True).stdout.splitlines()
        genuine = [line for line in minted if line.startswith("{")][: args.notifications]
        forged = [forge(body) for body in rng.sample(genuine, max(1, len(genuine) // 100))]
        stream = genuine + rng.sample(genuine, max(1, len(genuine) // 10)) + forged
        rng.shuffle(stream)
        log(f"stream: {len(genuine)} notifications of {subscriptions} subscriptions, {len(stream) - len(genuine) - len(forged)} duplicates, "
            f"{len(forged)} forged ({len(stream)} bodies); work directory {workdir}")

        postgres.start()
        reference_broker.start()

        def undisturbed_run(name, own_broker, bodies):
            """`bodies` once through a stack of its own on `own_broker`, no fault: the stack (its rows stay readable),
            its database's digest and the seconds sending took. The broker is stopped after."""
            stack = Stack(name, args, bin_dir, workdir, postgres, own_broker, f"{workdir}/root.pem")
            stacks.append(stack)
            stack.start()
            sender = Sender(lambda: stack.ingest_port, bodies, args.concurrency, 0)
            sender.run()
            stack.wait_drained(600)
            digest = stack.digest()
            stack.stop()
            own_broker.kill()
            return stack, digest, sender.elapsed

        # The reference: the same stream once, no fault.
        reference, expected, elapsed = undisturbed_run("reference", reference_broker, stream)
        broker.start()
        log(f"reference: {len(stream)} bodies in {elapsed:.1f} s, ledger {expected['ledger']}")

        # The chaos run.
        receiver = Receiver()
        chaos = Stack("chaos", args, bin_dir, workdir, postgres, broker, f"{workdir}/root.pem", receiver)
        stacks.append(chaos)
        chaos.start()
        faults = Faults(rng, args.faults, args.duration, chaos, broker, postgres)
        copies, genuine_set = collections.Counter(stream), set(genuine)
        once = [index for index, body in enumerate(stream) if body in genuine_set and copies[body] == 1]
        unsent = rng.sample(once, min(args.self_test_broker_loss, len(once))) if args.self_test_broker_loss else []
        sender = Sender(lambda: chaos.ingest_port, stream, args.concurrency, args.duration, unsent)
        fault_thread = threading.Thread(target=lambda: faults.run(time.monotonic()))
        fault_thread.start()
        sender.run()
        fault_thread.join()
        faults.join()
        for message in faults.errors:
            violations.append(f"a fault could not be injected: {message}")
        for process in chaos.processes():
            if not process.alive():
                violations.append(f"{process.name} had exited by itself (status {process.popen.returncode}; log {process.log_path})")
                process.start()
        log(f"sent: {sum(sender.ok)} of {len(stream)} bodies answered 200 in {sender.elapsed:.1f} s, {sum(sender.attempts.values()) - len(stream)} retries "
            f"({', '.join(f'{count} × {status}' for status, count in sorted(sender.statuses.items(), key=str))}); faults: "
            f"{', '.join(f'{kind} {count}' for kind, count in sorted(faults.injected.items()))}")
        # The ledger reaching the reference's first (tansu's lag figure can run ahead of what it serves), then the lag.
        ledger = lambda: int(postgres.sql(chaos.database, "SELECT count(*) FROM notification_ledger").strip())
        # A ledger short of the reference's for 30 s with nothing left to consume is a loss, told apart below (the
        # broker's, or the pipeline's): no need to wait longer for it.
        settled = {"count": -1, "since": time.monotonic()}
        def reached_or_settled():
            count = ledger()
            if count >= int(expected["ledger"]):
                return True
            if count != settled["count"]:
                settled.update(count=count, since=time.monotonic())
                return False
            return time.monotonic() - settled["since"] > 30 and chaos.lag() == 0
        try:
            wait_until(reached_or_settled, 300, "the ledger did not reach the reference's", interval=1)
        except ChaosSetupError:
            pass  # told apart below
        chaos.wait_drained(600)
        # The events topic, deduplicated by ce_id, and the outbox (every row published: wait_drained waited for it).
        events = {}
        for value, headers, _, _ in read_topic(broker.bootstrap, chaos.events_topic):
            events.setdefault(headers.get("ce_id"), (headers.get("ce_subject"), int(json.loads(value).get("sequence") or 0)))
        outbox, published = {}, set()
        for line in postgres.sql(chaos.database, "SELECT event_id, subject, sequence, published_at IS NOT NULL FROM entitlement_events_outbox").splitlines():
            event_id, subject, sequence, is_published = line.split("|")
            outbox[event_id] = (subject, int(sequence))
            if is_published == "t":
                published.add(event_id)
        # The webhooks service reads the topic: what the topic holds must reach the receiver.
        deliverable = set(events) & set(outbox)
        try:
            wait_until(lambda: deliverable <= receiver.delivered, 300, "the webhook receiver did not get every event", interval=0.5)
        except ChaosSetupError as error:
            violations.append(f"{error}: {len(deliverable & receiver.delivered)} of {len(deliverable)} delivered (log {chaos.webhooks.log_path})")

        # 1. Every 200 is in the archive or the dead-letter topic; a 200 missing from the topic itself is the broker's.
        # Ingest produces the signedPayload (the JWS) as the record's value: bodies are compared by it.
        payload_of = lambda body: json.loads(body)["signedPayload"]
        answered = {payload_of(stream[index]) for index, ok in enumerate(sender.ok) if ok}
        forged = [payload_of(body) for body in forged]
        if len(answered) < len({payload_of(body) for body in stream}):
            violations.append(f"{len(set(map(payload_of, stream))) - len(answered)} bodies never got a 200")
        archived = set(chaos.postgres.sql(chaos.database, "SELECT signed_payload FROM notifications").split())
        in_topic = collections.Counter(value.decode() for value, _, _, _ in read_topic(broker.bootstrap, chaos.topic))
        dead = read_topic(broker.bootstrap, chaos.dead_letter_topic)
        dead_bodies = {value.decode() for value, _, _, _ in dead}
        broker_lost = [body for body in answered if in_topic[body] == 0]
        pipeline_lost = [body for body in answered if in_topic[body] > 0 and body not in archived and body not in dead_bodies]
        broker_loss = (f"the BROKER lost {len(broker_lost)} records that it had acknowledged (answered 200 after an acknowledgement with "
                       f"an offset, not in the topic), e.g. {broker_lost[0][:120]}…") if broker_lost else None
        if broker_loss and args.broker_losses == "fail":
            violations.append(broker_loss)
        elif broker_loss:
            # The pipeline is held to what the broker kept: an undisturbed run of the stream without the lost
            # records (every copy of each: none of its copies is in the topic) is the reference from here on.
            log(broker_loss + " -- the broker's loss, discounted (--broker-losses discount)")
            lost = set(broker_lost)
            kept_stream = [body for body in stream if payload_of(body) not in lost]
            adjusted_broker = Broker(os.environ["PIPELINE_TANSU_BIN"], os.environ["PIPELINE_OBJECT_STORE_BIN"], workdir, persistent=False)
            brokers.append(adjusted_broker)
            adjusted_broker.start()
            reference, expected, _ = undisturbed_run("reference_adjusted", adjusted_broker, kept_stream)
            forged = [body for body in forged if body not in lost]
            log(f"reference without the broker's losses: {len(kept_stream)} bodies, ledger {expected['ledger']}")
        if pipeline_lost:
            violations.append(f"the PIPELINE lost {len(pipeline_lost)} records (in the topic, neither archived nor dead-lettered), e.g. {pipeline_lost[0][:120]}…")

        # 2. The database equals the undisturbed run's.
        actual = chaos.digest()
        if actual != expected:
            differing = [name for name in expected if expected[name] != actual[name]]
            violations.append(f"the database differs from the undisturbed run's in {differing}: {expected} vs {actual}")
            for table, exclude in (("transactions", []), ("entitlements", ["updated_at", "event_sequence", "last_event_after"])):
                ours, theirs = chaos.rows(table, exclude), reference.rows(table, exclude)
                first = next((pair for pair in zip(ours, theirs) if pair[0] != pair[1]), None)
                if first:
                    violations.append(f"first differing {table} row:\n  chaos:     {first[0][:400]}\n  reference: {first[1][:400]}")

        # 3. The dead-letter topic: exactly the forged bodies, one letter per record of them (by original position).
        positions = collections.Counter((h.get("original-topic"), h.get("original-partition"), h.get("original-offset")) for _, h, _, _ in dead)
        if dead_bodies != set(forged):
            violations.append(f"the dead-letter topic holds {len(dead_bodies)} distinct bodies; expected exactly the {len(forged)} forged "
                              f"({len(dead_bodies - set(forged))} unexpected, {len(set(forged) - dead_bodies)} missing)")
        forged_records = sum(in_topic[body] for body in set(forged))
        if len(positions) != forged_records:
            violations.append(f"{len(positions)} dead-lettered positions for {forged_records} forged records in the notifications topic")
        resent = sum(count - 1 for count in positions.values())

        # 4. Events: the topic, deduplicated by ce_id, is the outbox; each subscription's sequence is 1…n. An event
        # the relay marked published (it does so only on an acknowledgement with an offset, docs/events.md) that the
        # topic does not hold was lost by the broker, as a notification answered 200 and missing from its topic is.
        missing = set(outbox) - set(events)
        events_lost_by_broker = missing & published
        if events_lost_by_broker:
            example = min(events_lost_by_broker, key=lambda event_id: outbox[event_id])
            loss = (f"the BROKER lost {len(events_lost_by_broker)} event records that it had acknowledged with an offset (published in "
                    f"the outbox, not in the events topic), e.g. {example} ({outbox[example][0]} sequence {outbox[example][1]})")
            if args.broker_losses == "fail":
                violations.append(loss)
            else:
                log(loss + " -- the broker's loss, discounted (--broker-losses discount)")
        differing = [event_id for event_id in set(events) & set(outbox) if events[event_id] != outbox[event_id]]
        if missing - published or set(events) - set(outbox) or differing:
            violations.append(f"the events topic ({len(events)} distinct ids) is not the outbox ({len(outbox)} events): "
                              f"{len(missing - published)} never published, {len(set(events) - set(outbox))} unknown, "
                              f"{len(differing)} with another subject or sequence")
        sequences = collections.defaultdict(list)
        for subject, sequence in list(events.values()) + [outbox[event_id] for event_id in events_lost_by_broker]:
            sequences[subject].append(sequence)
        gaps = [(subject, sorted(values)) for subject, values in sequences.items() if sorted(values) != list(range(1, len(values) + 1))]
        if gaps:
            violations.append(f"{len(gaps)} subscriptions' event sequences have gaps or repeats, e.g. {gaps[0][0]}: {gaps[0][1]}")

        # 5. Webhooks: every event the topic holds delivered, every signature valid.
        undelivered = deliverable - receiver.delivered
        if undelivered or receiver.refused:
            violations.append(f"webhooks: {len(undelivered)} events never delivered, {receiver.refused} deliveries with a bad signature")

        log(f"checked: {len(answered)} bodies answered 200, {len(archived)} archived, {len(dead)} dead letters ({len(positions)} positions, "
            f"{resent} re-sent after a kill), {len(outbox)} events for {len(sequences)} subscriptions, {len(receiver.delivered)} delivered by webhook")
        log("faults: " + "; ".join(faults.log))
    except ChaosSetupError as error:
        violations.append(f"the run could not finish: {error}")
    finally:
        for stack in stacks:
            for process in stack.processes():
                process.kill()
        for each in brokers:
            each.kill()
        postgres.destroy()
    elapsed = time.monotonic() - started
    if violations:
        print(f"chaos: FAILED after {elapsed:.0f} s (seed {args.seed}); logs in {workdir}", file=sys.stderr)
        for violation in violations:
            print("  - " + violation, file=sys.stderr)
        sys.exit(1)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    log(f"held: every check passed in {elapsed:.0f} s (seed {args.seed})")


if __name__ == "__main__":
    main()
