import AppStoreNotifications
import Foundation
import TestSupport

/// Ingest throughput and latency next to librdkafka's raw produce rate (kcat, same broker, same 18 KB records,
/// acks=all, idempotent) measured in the same run, and the ingest process's RSS afterwards.
///
/// Usage: ingest-bench BOOTSTRAP [REQUESTS_PER_LEVEL]. Runs the release `ingest` binary (`ChildProcess.pipelineBinary`).
@main
struct IngestBench {
    static func main() async throws {
        let arguments = BenchArguments(usage: "ingest-bench BOOTSTRAP [REQUESTS_PER_LEVEL]", required: 1)
        let bootstrap = arguments[1]
        let count = arguments.int(2, default: 5_000)
        let binary = ChildProcess.pipelineBinary("ingest")
        let port = TestServices.freePort()
        let topic = "bench-ingest-\(UUID().uuidString.prefix(8))"

        let ingest = try ChildProcess.startIngest(binary: binary, bootstrap: bootstrap, port: port, topic: topic)

        let bodies = try NotificationMinter.realisticBodies(count: count)
        let size = bodies[0].count
        print("ingest-bench: \(count) requests per level, bodies of \(size) bytes, broker \(bootstrap)")
        // Warm up: topic creation, connections.
        _ = await HTTPLoad.run(port: port, count: 200, concurrency: 8) { ("/v2/notifications", ["Content-Type": "application/json"], bodies[$0]) }
        var best = 0.0
        var cpuBefore = cpuSeconds(pid: ingest.processIdentifier)
        var answered = 0
        print("concurrency   requests/s   p50 ms   p99 ms   non-200   ingest CPU us/request")
        for concurrency in [1, 16, 64] {
            let requests = concurrency == 1 ? min(count, 1_000) : count
            let start = DispatchTime.now().uptimeNanoseconds
            let outcomes = await HTTPLoad.run(port: port, count: requests, concurrency: concurrency) { ("/v2/notifications", ["Content-Type": "application/json"], bodies[$0]) }
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
            let latencies = outcomes.map(\.latency).sorted()
            let rate = Double(requests) / seconds
            best = max(best, rate)
            let failures = outcomes.filter { $0.status != 200 }.count
            let cpuAfter = cpuSeconds(pid: ingest.processIdentifier)
            let cpuPerRequest = (cpuAfter - cpuBefore) / Double(requests) * 1e6
            cpuBefore = cpuAfter
            answered += requests
            print(String(format: "%11d %12.0f %8.2f %8.2f %9d %23.0f", concurrency, rate, percentile(latencies, 0.50) * 1000, percentile(latencies, 0.99) * 1000, failures, cpuPerRequest))
        }
        let rss = ChildProcess.residentMegabytes(pid: ingest.processIdentifier) ?? -1
        kill(ingest.processIdentifier, SIGTERM)
        ingest.waitUntilExit()

        // The reference: librdkafka producing the same payloads, as fast as it can, same acks and idempotence.
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("ingest-bench-\(topic).txt")
        var lines = Data()
        let payloads = bodies.map { body -> [UInt8] in
            let object = try? StrictJSONParser().parseObject(body)
            return Array((object?["signedPayload"]?.stringValue ?? "").utf8)
        }
        for payload in payloads { lines.append(contentsOf: payload); lines.append(0x0A) }
        try lines.write(to: file)
        let kcat = Process()
        kcat.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        kcat.arguments = ["kcat", "-P", "-b", bootstrap, "-t", topic + "-raw", "-X", "acks=all", "-X", "enable.idempotence=true", "-X", "linger.ms=2", "-X", "compression.type=lz4", "-l", file.path]
        let start = DispatchTime.now().uptimeNanoseconds
        try kcat.run()
        kcat.waitUntilExit()
        let raw = Double(payloads.count) / (Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
        try? FileManager.default.removeItem(at: file)

        // Ingest's own per-request work, without HTTP and Kafka: parse, shape check, routing key.
        let start2 = DispatchTime.now().uptimeNanoseconds
        for body in bodies {
            let payload = try ResponseBodyV2.parse(body: body).signedPayload
            try ResponseBodyV2.checkCompactJWSShape(payload)
            _ = UnverifiedPeek.partitionKey(ofNotification: payload)
        }
        let ownWork = Double(DispatchTime.now().uptimeNanoseconds - start2) / 1e3 / Double(bodies.count)
        print(String(format: "ingest's own work per request (parse, shape check, routing key), no HTTP or Kafka: %.0f us", ownWork))
        let payloadsText = try bodies.map { try ResponseBodyV2.parse(body: $0).signedPayload }
        func perItem(_ body: () throws -> Void) rethrows -> Double {
            let start = DispatchTime.now().uptimeNanoseconds
            try body()
            return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e3 / Double(bodies.count)
        }
        let parseCost = try perItem { for body in bodies { _ = try ResponseBodyV2.parse(body: body) } }
        let shapeCost = try perItem { for payload in payloadsText { try ResponseBodyV2.checkCompactJWSShape(payload) } }
        let peekCost = perItem { for payload in payloadsText { _ = UnverifiedPeek.partitionKey(ofNotification: payload) } }
        print(String(format: "  of which: body parse %.0f us, shape check %.0f us, routing key %.0f us", parseCost, shapeCost, peekCost))
        print(String(format: "raw librdkafka produce (kcat, same records): %.0f msg/s", raw))
        print(String(format: "ratio (best ingest requests/s to raw produce): %.2f (target >= 0.5)", best / raw))
        print(String(format: "ingest RSS after the run: %.1f MB (target < 100 MB)", rss))
        print(String(format: "figure ingest.residentMegabytesPeak %.0f", rss))  // recorded in deploy/measured-memory.json
    }

    static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }

    /// User + system CPU seconds of a process (from /proc/PID/stat, in clock ticks of 1/100 s).
    static func cpuSeconds(pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let closing = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: closing)...].split(separator: " ")
        // After the command name: state is field 3, utime 14, stime 15 (1-based), i.e. indexes 11 and 12 here.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
