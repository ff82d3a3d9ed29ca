import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where the real services for tests are: started by `scripts/services.sh up`, found through the environment.
///
/// A suite that needs a service uses `TestServices.kafkaTrait`/`postgresTrait`: locally, without the service,
/// the suite is skipped with a message saying how to start it; in CI (`CI=true`) it runs and fails instead.
public enum TestServices {
    static var environment: [String: String] { ProcessInfo.processInfo.environment }

    public static var isCI: Bool { environment["CI"] == "true" }

    /// `KAFKA_BOOTSTRAP_SERVERS`, when set.
    public static var kafkaBootstrapServers: String? { environment["KAFKA_BOOTSTRAP_SERVERS"].flatMap { $0.isEmpty ? nil : $0 } }

    /// `POSTGRES_URL`, when set.
    public static var postgresURL: String? { environment["POSTGRES_URL"].flatMap { $0.isEmpty ? nil : $0 } }

    /// Run Kafka suites when a broker is configured, and always in CI (where a missing broker fails).
    public static var runKafkaSuites: Bool { kafkaBootstrapServers != nil || isCI }
    public static var runPostgresSuites: Bool { postgresURL != nil || isCI }

    public static let missingKafka = "KAFKA_BOOTSTRAP_SERVERS is not set: run `eval \"$(scripts/services.sh up)\"` first (scripts/test.sh does)"
    public static let missingPostgres = "POSTGRES_URL is not set: run `eval \"$(scripts/services.sh up)\"` first (scripts/test.sh does)"

    /// A name no other test or run uses, for topics, groups, schemas.
    public static func uniqueName(_ prefix: String) -> String {
        "\(prefix)-\(UInt32.random(in: 0...UInt32.max))-\(getpid())"
    }

    /// A TCP port on 127.0.0.1 that was free a moment ago, for a service a test starts.
    ///
    /// Taken below the kernel's ephemeral range (`ip_local_port_range`), never handed out twice by this process: a
    /// port the kernel picked for a bind to port 0 and that was released comes from that range, and the kernel may
    /// give it to any outgoing connection (a client of PostgreSQL or the broker) as its source port before the
    /// service binds it. That race stopped a worker with "Address already in use" in a CI run.
    public static func freePort() -> Int {
        let ephemeralStart = ephemeralPortRange().lowerBound
        for _ in 0..<2_000 {
            let port = Int.random(in: 10_000..<max(10_001, ephemeralStart))
            let fresh = handedOut.withLock { ports in ports.insert(port).inserted }
            if fresh, canBind(port) { return port }
        }
        return kernelChosenPort()
    }

    /// Ports `freePort` gave out in this process.
    private static let handedOut = Mutex<Set<Int>>([])

    /// `/proc/sys/net/ipv4/ip_local_port_range`, Linux's default where it cannot be read.
    static func ephemeralPortRange() -> ClosedRange<Int> {
        let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        let bounds = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).compactMap { Int($0) }
        guard bounds.count == 2, bounds[0] <= bounds[1], bounds[0] > 10_001 else { return 32_768...60_999 }
        return bounds[0]...bounds[1]
    }

    /// Whether a socket can bind 127.0.0.1:`port` now.
    static func canBind(_ port: Int) -> Bool {
        withLoopbackSocket(port: port) { descriptor, address, length in bind(descriptor, address, length.pointee) == 0 }
    }

    /// A port the kernel picks (from the ephemeral range): the fallback when no port below it was free.
    static func kernelChosenPort() -> Int {
        withLoopbackSocket(port: 0) { descriptor, address, length in
            guard bind(descriptor, address, length.pointee) == 0, getsockname(descriptor, address, length) == 0 else { return 0 }
            return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
        }
    }

    /// True once something accepts TCP connections on 127.0.0.1:`port`.
    public static func isListening(port: Int) -> Bool {
        withLoopbackSocket(port: port) { descriptor, address, length in connect(descriptor, address, length.pointee) == 0 }
    }

    /// A new TCP socket and the address 127.0.0.1:`port` with its length, for `body`; the socket is closed after.
    static func withLoopbackSocket<T>(
        port: Int, _ body: (_ descriptor: Int32, _ address: UnsafeMutablePointer<sockaddr>, _ length: UnsafeMutablePointer<socklen_t>) -> T
    ) -> T {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        return withUnsafeMutablePointer(to: &length) { length in
            withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body(descriptor, $0, length) } }
        }
    }
}

/// Runs our own executables as child processes, for tests and benchmarks that need a real process (signals, RSS).
public enum ChildProcess {
    /// Starts the `ingest` binary at `binary` on 127.0.0.1:`port`, producing to `topic`, and waits until it listens.
    public static func startIngest(binary: String, bootstrap: String, port: Int, topic: String, environment extra: [String: String] = [:]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        var environment = ProcessInfo.processInfo.environment
        environment["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
        environment["INGEST_HOST"] = "127.0.0.1"
        environment["INGEST_PORT"] = String(port)
        environment["NOTIFICATIONS_TOPIC"] = topic
        environment["LOG_LEVEL"] = "error"
        process.environment = environment.merging(extra) { _, new in new }
        try process.run()
        for _ in 0..<200 where !TestServices.isListening(port: port) { usleep(50_000) }
        return process
    }
}

extension ChildProcess {
    /// Where a benchmark finds the pipeline's release binaries (`worker`, `ingest`, `customer-api`):
    /// `PIPELINE_BIN_DIR`, else the main package's `.build/release` seen from the repository root or from
    /// `Benchmarks/` (the benchmarks are a package of their own and do not build the main package's executables).
    public static func pipelineBinary(_ name: String) -> String {
        let environment = ProcessInfo.processInfo.environment
        let candidates = [environment["PIPELINE_BIN_DIR"], ".build/release", "../.build/release"].compactMap { $0 }
        for directory in candidates where FileManager.default.isExecutableFile(atPath: directory + "/" + name) {
            return URL(fileURLWithPath: directory + "/" + name).standardizedFileURL.path
        }
        return (environment["PIPELINE_BIN_DIR"] ?? ".build/release") + "/" + name
    }

    /// VmRSS of `pid` in MB, from /proc (nil when unreadable): the benchmarks' memory figure.
    public static func residentMegabytes(pid: Int32) -> Double? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Double($0) })
        else { return nil }
        return kilobytes / 1024
    }


    /// Starts the `worker` binary with `environment` added to ours, its standard error appended to `logFile`
    /// (at `LOG_LEVEL=info` unless `environment` says otherwise, so a failing test can show what the worker
    /// did), and waits without blocking a thread until its ops server listens on `WORKER_OPS_PORT`.
    public static func startWorker(binary: String, environment extra: [String: String], logFile: String) async throws -> Process {
        try await start(binary: binary, environment: extra, logFile: logFile, listeningOn: extra["WORKER_OPS_PORT"].flatMap(Int.init))
    }

    /// Starts one of our service binaries with `environment` added to ours (`LOG_LEVEL=info` unless it says
    /// otherwise), its output appended to `logFile`, and waits without blocking a thread until it listens on
    /// `port` (or exits).
    public static func start(binary: String, environment extra: [String: String], logFile: String, listeningOn port: Int?) async throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        var environment = ProcessInfo.processInfo.environment
        environment["LOG_LEVEL"] = "info"
        environment.merge(extra) { _, new in new }
        process.environment = environment
        if !FileManager.default.fileExists(atPath: logFile) { _ = FileManager.default.createFile(atPath: logFile, contents: nil) }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logFile))
        try log.seekToEnd()
        process.standardError = log
        process.standardOutput = log
        try process.run()
        try? log.close()
        if let port {
            for _ in 0..<400 where !TestServices.isListening(port: port) && process.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        }
        return process
    }

    /// SIGKILL: no goodbye, no commit, no flush. Returns once the process is gone.
    public static func kill(_ process: Process) async {
        Glibc.kill(process.processIdentifier, SIGKILL)
        while process.isRunning { try? await Task.sleep(for: .milliseconds(20)) }
    }

    /// SIGTERM, then wait for the graceful exit (SIGKILL after `timeout`).
    public static func terminate(_ process: Process, timeout: Duration = .seconds(30)) async {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = ContinuousClock.now + timeout
        while process.isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        if process.isRunning { await kill(process) }
    }
}

/// A PostgreSQL cluster of the test's own, which the test may stop and start again (fault tests). Found through
/// `PIPELINE_PG_BIN` (set by `scripts/services.sh env`); run as the `postgres` user when we are root.
public final class PrivatePostgres: @unchecked Sendable {
    public let port: Int
    public var url: String { "postgres://postgres@127.0.0.1:\(port)/postgres" }
    private let bin: String
    private let directory: String

    public init?() {
        guard let bin = ProcessInfo.processInfo.environment["PIPELINE_PG_BIN"], FileManager.default.isExecutableFile(atPath: bin + "/pg_ctl") else { return nil }
        self.bin = bin
        self.port = TestServices.freePort()
        self.directory = NSTemporaryDirectory() + "pipeline-pg-\(UUID().uuidString)"
    }

    /// Runs a PostgreSQL tool to completion (as the `postgres` user when we are root). posix_spawn and waitpid,
    /// not Foundation's Process: `Process.waitUntilExit` was seen never to return after `pg_ctl start`, whose
    /// server outlives it, which hung the outage test.
    private func run(_ arguments: [String]) throws {
        let command = getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] + arguments : arguments
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv: [UnsafeMutablePointer<CChar>?] = command.map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, command[0], &actions, nil, argv, environ)
        guard spawned == 0 else { throw PrivatePostgresError(description: "cannot start \(command[0]): \(String(cString: strerror(spawned)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1, errno == EINTR {}
        let exited = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        guard exited == 0 else { throw PrivatePostgresError(description: "\(arguments.joined(separator: " ")) exited with \(exited)") }
    }

    /// Creates the cluster the first time, then starts it and waits until it accepts connections (on a thread of its
    /// own: `initdb` and `pg_ctl -w` take seconds).
    public func start() async throws {
        try await DedicatedThread.run { try self.startBlocking() }
    }

    private func startBlocking() throws {
        if !FileManager.default.fileExists(atPath: directory + "/data/PG_VERSION") {
            try run(["/bin/mkdir", "-p", directory + "/data", directory + "/sockets"])
            try run([bin + "/initdb", "-D", directory + "/data", "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"])
        }
        try run([
            bin + "/pg_ctl", "-D", directory + "/data", "-l", directory + "/log", "-w", "-o",
            "-c listen_addresses=127.0.0.1 -c port=\(port) -c unix_socket_directories=\(directory)/sockets -c fsync=off -c max_connections=100",
            "start",
        ])
    }

    /// Stops the server at once (`-m immediate`: connections cut, no checkpoint), as a crash would.
    public func stop() async throws {
        try await DedicatedThread.run { try self.stopBlocking() }
    }

    private func stopBlocking() throws {
        try run([bin + "/pg_ctl", "-D", directory + "/data", "-m", "immediate", "stop"])
    }

    deinit {
        try? stopBlocking()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

public struct PrivatePostgresError: Error, CustomStringConvertible {
    public var description: String
}

/// A tansu broker of the test's own, which the test may kill and restart (fault tests).
///
/// Persistent brokers store into tansu's s3 engine on a loopback object store of their own
/// (`scripts/object-store.py`, a small S3 in memory), so topics, records,
/// group offsets and idempotent-producer state survive a kill, as they do on a real Kafka cluster; others keep
/// everything in memory and lose it on restart.
public final class PrivateKafkaBroker: @unchecked Sendable {
    public let port: Int
    public var bootstrapServers: String { "127.0.0.1:\(port)" }
    private let binary: String
    private let persistent: Bool
    private var process: Process?
    private var objectStore: Process?
    private var objectStorePort = 0

    /// Nil when the tansu binary (or, for a persistent broker, the object store) is unknown: `PIPELINE_TANSU_BIN`
    /// and `PIPELINE_OBJECT_STORE_BIN` are set by `scripts/services.sh env`.
    public init?(persistent: Bool = false) {
        let environment = ProcessInfo.processInfo.environment
        guard let binary = environment["PIPELINE_TANSU_BIN"], FileManager.default.isExecutableFile(atPath: binary) else { return nil }
        if persistent {
            guard let store = environment["PIPELINE_OBJECT_STORE_BIN"], FileManager.default.isExecutableFile(atPath: store) else {
                return nil
            }
        }
        self.binary = binary
        self.persistent = persistent
        self.port = TestServices.freePort()
    }

    /// Starts the broker (and, the first time, its object store) and waits until it accepts connections (on a
    /// thread of its own: the wait polls with `usleep`).
    public func start() async throws {
        try await DedicatedThread.run { try self.startBlocking() }
    }

    private func startBlocking() throws {
        var environment = ProcessInfo.processInfo.environment
        var storage = "memory://tansu/"
        if persistent {
            if objectStore == nil { try startObjectStore() }
            storage = "s3://tansu/"
            environment["AWS_ENDPOINT"] = "http://127.0.0.1:\(objectStorePort)"
            environment["AWS_ALLOW_HTTP"] = "true"
            environment["AWS_ACCESS_KEY_ID"] = "test"
            environment["AWS_SECRET_ACCESS_KEY"] = "test"
            environment["AWS_DEFAULT_REGION"] = "us-east-1"
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = [
            "broker", "--listener-url", "tcp://127.0.0.1:\(port)", "--advertised-listener-url", "tcp://127.0.0.1:\(port)",
            "--storage-engine", storage,
        ]
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        for _ in 0..<200 where !TestServices.isListening(port: port) { usleep(50_000) }
    }

    private func startObjectStore() throws {
        guard let store = ProcessInfo.processInfo.environment["PIPELINE_OBJECT_STORE_BIN"] else { return }
        objectStorePort = TestServices.freePort()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: store)
        process.arguments = ["-p", String(objectStorePort)]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        objectStore = process
        for _ in 0..<200 where !TestServices.isListening(port: objectStorePort) { usleep(50_000) }
        // The bucket tansu writes to.
        let create = Process()
        create.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        create.arguments = ["python3", "-c", "import urllib.request as u; u.urlopen(u.Request('http://127.0.0.1:\(objectStorePort)/tansu', method='PUT')).read()"]
        try create.run()
        create.waitUntilExit()
    }

    /// Kills the broker at once (SIGKILL): no goodbye to its clients. Its object store keeps running.
    public func kill() {
        guard let process else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    deinit {
        kill()
        if let objectStore {
            Glibc.kill(objectStore.processIdentifier, SIGKILL)
            objectStore.waitUntilExit()
        }
    }
}
