import Logging
import Metrics
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// A position in the primary's write-ahead log, taken after a commit: a read that carries it is served by a replica
/// only once that replica has replayed past it, so it sees that commit (read-your-writes). Written as PostgreSQL
/// writes an `pg_lsn` (`16/B374D848`), the `Consistency-Token` of the customer API's and the console's answers.
public struct ConsistencyToken: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let position: UInt64

    public init(position: UInt64) { self.position = position }

    /// A token from the primary's insert position: where that position is just past a page header (the last record
    /// ended on a page boundary), the boundary itself, which is where a replica's replay of that record ends; so
    /// a replica that replayed everything is never "behind" a header. A commit record is longer than a header,
    /// so no commit hides in between.
    public init(insertPosition position: UInt64) {
        if position % Self.segmentBytes == Self.longHeaderBytes {
            self.position = position - Self.longHeaderBytes
        } else if position % Self.pageBytes == Self.shortHeaderBytes {
            self.position = position - Self.shortHeaderBytes
        } else {
            self.position = position
        }
    }

    /// PostgreSQL's defaults (`wal_segment_size` 16 MB, 8 kB pages) and page header sizes.
    static let (segmentBytes, pageBytes, longHeaderBytes, shortHeaderBytes): (UInt64, UInt64, UInt64, UInt64) = (16 << 20, 8_192, 40, 24)

    /// Parses `X/Y` (two hexadecimal halves of at most 8 digits); nil for anything else.
    public init?(_ text: some StringProtocol) {
        let halves = text.split(separator: "/", omittingEmptySubsequences: false)
        guard halves.count == 2, (1...8).contains(halves[0].count), (1...8).contains(halves[1].count),
            let high = UInt64(halves[0], radix: 16), let low = UInt64(halves[1], radix: 16)
        else { return nil }
        position = high << 32 | low
    }

    public var description: String { String(position >> 32, radix: 16, uppercase: true) + "/" + String(position & 0xFFFF_FFFF, radix: 16, uppercase: true) }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.position < rhs.position }
}

/// How reads choose between the primary and its streaming replicas (`POSTGRES_READ_*`, docs/scale.md).
public struct ReadRoutingSettings: Sendable, Hashable {
    /// A read with a token waits at most this long for a replica to replay past it, then goes to the primary.
    public var wait: Duration = .milliseconds(200)
    /// A replica further behind the primary than this is skipped until it catches up.
    public var maximumLag: Duration = .seconds(5)
    /// After a write, that customer's (or transaction's) reads carry the write's token this long without being sent it.
    public var sticky: Duration = .seconds(5)
    /// How often each replica's replay position and the primary's position are read (the lag's resolution).
    public var probeInterval: Duration = .milliseconds(100)
    /// A replica query (or probe) that takes longer is given up and the read goes to the primary.
    public var replicaTimeout: Duration = .milliseconds(500)

    public init() {}
}

/// Where reads go: the primary (`POSTGRES_URL`), or one of the streaming replicas of `POSTGRES_READ_URL` that is up,
/// within `maximumLag` of the primary, and (for a read with a consistency token) replayed past the token. Every
/// write, every lock and the worker stay on the primary; a replica that fails a read is skipped at once and the read
/// answered by the primary, so a caller never sees a replica's fault. Without replicas every read goes to the
/// primary and the only cost is the token of each write (one `pg_current_wal_insert_lsn()`).
///
/// A service: it runs the replicas' pools and a probe that reads, every `probeInterval`, the primary's insert
/// position and each replica's replay position. A replica's lag is the age of the oldest primary position it has
/// not replayed (0 when it has replayed everything the probe saw), so an idle replica is never "behind".
public final class ReadRouter: Service, Sendable {
    public let primary: PostgresClient
    public let settings: ReadRoutingSettings
    let replicas: [ReplicaTarget]
    let logger: Logger
    let sticky = Mutex<StickyTokens>(StickyTokens())
    let history = Mutex<[(at: ContinuousClock.Instant, position: UInt64)]>([])

    /// One replica: its pool, its name in metrics (`replica-1`, ...) and what the probe last saw.
    final class ReplicaTarget: Sendable {
        let name: String
        let client: PostgresClient
        let state = Mutex(ReplicaState())
        init(name: String, client: PostgresClient) { (self.name, self.client) = (name, client) }
    }

    struct ReplicaState {
        var up = false
        var replayed: UInt64 = 0
        var lag: Duration = .seconds(3_600)
    }

    /// Why a read went where it went (the `reason` label of `postgres_reads_total`).
    public enum Reason: String, Sendable {
        case noReplica = "no-replica", replica, replayed = "token-replayed", waited = "token-waited", tokenBehind = "token-behind"
        case replicaDown = "replica-down", replicaLagging = "replica-lagging", replicaFailed = "replica-failed"
    }

    public init(primary: PostgresClient, replicas: [PostgresClient.Configuration], settings: ReadRoutingSettings, logger: Logger) {
        self.primary = primary
        self.settings = settings
        self.logger = logger
        self.replicas = replicas.enumerated().map { index, configuration in
            ReplicaTarget(name: "replica-\(index + 1)", client: PostgresClient(configuration: configuration, backgroundLogger: logger))
        }
    }

    public var hasReplicas: Bool { !replicas.isEmpty }

    public func run() async throws {
        guard hasReplicas else { return try await gracefulShutdown() }
        await withDiscardingTaskGroup { group in
            for replica in replicas { group.addTask { await replica.client.run() } }
            // The probe runs here until shutdown; then the replicas' pools stop.
            await cancelWhenGracefulShutdown {
                while !Task.isCancelled {
                    await self.probe()
                    try? await Task.sleep(for: self.settings.probeInterval)
                }
            }
            group.cancelAll()
        }
    }

    /// For a command (`pipelinectl metrics`): runs the replicas' pools and the probe around `body`, after a first
    /// probe, so the command's reads can go to a replica from its first one.
    public func whileRunning<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        guard hasReplicas else { return try await body() }
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.run() }
            defer { group.cancelAll() }
            await probe()
            return try await body()
        }
    }

    // MARK: - Tokens

    /// The primary's WAL insert position now: after a commit this caller saw, a position at or past that commit's
    /// record (the insert position, not the write position: with `synchronous_commit = off` the write position can
    /// still be before a commit that returned).
    public func currentToken() async throws -> ConsistencyToken {
        try await Self.position(of: primary, "SELECT pg_current_wal_insert_lsn()::text").map(ConsistencyToken.init(insertPosition:))
            ?? ConsistencyToken(position: 0)
    }

    /// Remembers a write's token for `keys` (a customer, a transaction) for `settings.sticky`: their reads without a
    /// token use it, so the writer's next reads through this process never see an older state.
    public func remember(_ token: ConsistencyToken, for keys: [String]) {
        guard hasReplicas, settings.sticky > .zero else { return }
        let until = ContinuousClock.now + settings.sticky
        sticky.withLock { tokens in for key in keys { tokens.remember(key, token, until: until) } }
    }

    /// The newest of `token` and what `remember` holds for `keys`.
    public func token(_ token: ConsistencyToken?, orRememberedFor keys: [String]) -> ConsistencyToken? {
        guard hasReplicas else { return token }
        let now = ContinuousClock.now
        let remembered = sticky.withLock { tokens in keys.compactMap { tokens.token(for: $0, now: now) }.max() }
        return [token, remembered].compactMap { $0 }.max()
    }

    // MARK: - Reads

    /// Runs `body` on a replica that may serve it (see the type's summary), or on the primary. A replica that fails
    /// (an error or no answer within `replicaTimeout`) is marked down and `body` runs again on the primary: `body`
    /// must only read.
    /// `timeout` (default `replicaTimeout`) bounds the read on the replica: a long read (a metric) gives its own.
    public func read<T: Sendable>(
        after token: ConsistencyToken? = nil, timeout: Duration? = nil, _ body: @escaping @Sendable (PostgresClient) async throws -> T
    ) async throws -> T {
        let (replica, reason) = await choose(after: token)
        if let replica {
            do {
                let value = try await withDeadline(timeout ?? settings.replicaTimeout, "a read on \(replica.name)") { try await body(replica.client) }
                Self.count(onReplica: true, reason: reason)
                return value
            } catch {
                // A query error the primary would answer the same way (bad SQL, a constraint) is not the replica's
                // fault, but it is cheaper to ask once more than to tell them apart; the replica rests until the probe.
                replica.state.withLock { $0.up = false }
                logger.warning("a read on \(replica.name) failed; the primary answers it: \(String(reflecting: error))")
                Self.count(onReplica: false, reason: .replicaFailed)
                return try await body(primary)
            }
        }
        Self.count(onReplica: false, reason: reason)
        return try await body(primary)
    }

    /// The replica to read from (nil: the primary), and why.
    func choose(after token: ConsistencyToken?) async -> (ReplicaTarget?, Reason) {
        guard hasReplicas else { return (nil, .noReplica) }
        let states = replicas.map { ($0, $0.state.withLock { $0 }) }
        let healthy = states.filter { $0.1.up }
        guard !healthy.isEmpty else { return (nil, .replicaDown) }
        let fresh = healthy.filter { $0.1.lag <= settings.maximumLag }
        guard !fresh.isEmpty else { return (nil, .replicaLagging) }
        guard let token else {
            // Spread over the fresh replicas; one is the common case.
            return (fresh[Int.random(in: 0..<fresh.count)].0, .replica)
        }
        if let ready = fresh.first(where: { $0.1.replayed >= token.position }) { return (ready.0, .replayed) }
        // Behind the token: wait for the least-lagging one if it can plausibly catch up within the wait.
        let candidate = fresh.min { $0.1.lag < $1.1.lag }!
        guard candidate.1.lag <= settings.wait + settings.probeInterval else { return (nil, .tokenBehind) }
        let started = ContinuousClock.now
        defer { Self.waits.recordNanoseconds(Self.nanoseconds(ContinuousClock.now - started)) }
        let deadline = started + settings.wait
        let client = candidate.0.client
        while ContinuousClock.now < deadline {
            let answer = try? await withDeadline(settings.replicaTimeout, "a replay position") {
                try await Self.position(of: client, "SELECT pg_last_wal_replay_lsn()::text")
            }
            guard let replayed = answer else { break }
            candidate.0.state.withLock { $0.replayed = max($0.replayed, replayed) }
            if replayed >= token.position { return (candidate.0, .waited) }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return (nil, .tokenBehind)
    }

    // MARK: - Probe

    /// Reads the primary's insert position and each replica's replay position (each within `replicaTimeout`), and
    /// from them each replica's lag.
    public func probe() async {
        let now = ContinuousClock.now
        let primary = primary
        if let position = try? await withDeadline(settings.replicaTimeout, "the primary's position", {
            try await Self.position(of: primary, "SELECT pg_current_wal_insert_lsn()::text")
        }) {
            let position = ConsistencyToken(insertPosition: position).position
            history.withLock { samples in
                if samples.last?.position != position { samples.append((now, position)) }
                // Kept for the longest lag that matters, and at least one sample.
                let horizon = now - settings.maximumLag - .seconds(60)
                while samples.count > 1, samples[1].at < horizon { samples.removeFirst() }
            }
        }
        await withDiscardingTaskGroup { group in
            for replica in replicas {
                group.addTask { [self] in
                    let replayed = try? await withDeadline(settings.replicaTimeout, "\(replica.name)'s replay position") {
                        try await Self.position(of: replica.client, "SELECT pg_last_wal_replay_lsn()::text")
                    }
                    guard let replayed else {
                        let wasUp = replica.state.withLock { state in defer { state.up = false }; return state.up }
                        if wasUp { logger.warning("\(replica.name) does not answer; reads go to the primary") }
                        return
                    }
                    let lag = self.lag(replayed: replayed, now: ContinuousClock.now)
                    let wasUp = replica.state.withLock { state in
                        defer { (state.up, state.replayed, state.lag) = (true, max(state.replayed, replayed), lag) }
                        return state.up
                    }
                    if !wasUp { logger.notice("\(replica.name) answers again; it serves reads") }
                    Gauge(label: "postgres_replica_lag_seconds", dimensions: [("replica", replica.name)]).record(Double(lag.components.seconds) + Double(lag.components.attoseconds) / 1e18)
                    Gauge(label: "postgres_replica_up", dimensions: [("replica", replica.name)]).record(1)
                }
            }
        }
        for replica in replicas where !replica.state.withLock({ $0.up }) {
            Gauge(label: "postgres_replica_up", dimensions: [("replica", replica.name)]).record(0)
        }
    }

    /// The age of the oldest primary position the replica has not replayed; zero when it replayed all of them.
    func lag(replayed: UInt64, now: ContinuousClock.Instant) -> Duration {
        history.withLock { samples in
            guard let behind = samples.first(where: { $0.position > replayed }) else { return .zero }
            return now - behind.at
        }
    }

    static func position(of client: PostgresClient, _ query: PostgresQuery) async throws -> UInt64? {
        for try await text in try await client.query(query).decode(String?.self) {
            return text.flatMap { ConsistencyToken($0) }?.position
        }
        return nil
    }

    // MARK: - Metrics

    static let waits = Timer(label: "postgres_read_wait_seconds", preferredDisplayUnit: .seconds)

    static func count(onReplica: Bool, reason: Reason) {
        Counter(label: "postgres_reads_total", dimensions: [("target", onReplica ? "replica" : "primary"), ("reason", reason.rawValue)]).increment()
    }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }
}

/// Tokens remembered for a short while by key, bounded: when full, the expired entries go, and if none had expired,
/// all of them (their reads then carry only the tokens they are sent, as with `POSTGRES_READ_STICKY=0`).
struct StickyTokens {
    var entries: [String: (token: ConsistencyToken, until: ContinuousClock.Instant)] = [:]
    static let capacity = 100_000

    mutating func remember(_ key: String, _ token: ConsistencyToken, until: ContinuousClock.Instant) {
        if entries.count >= Self.capacity {
            let now = ContinuousClock.now
            entries = entries.filter { $0.value.until > now }
            if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
        }
        let kept = entries[key].map { max($0.token, token) } ?? token
        entries[key] = (kept, until)
    }

    func token(for key: String, now: ContinuousClock.Instant) -> ConsistencyToken? {
        guard let entry = entries[key], entry.until > now else { return nil }
        return entry.token
    }
}
