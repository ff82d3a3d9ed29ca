import Foundation
import KafkaClient
import Logging
import TestSupport

/// Produce and consume throughput of our librdkafka wrapper next to kcat (plain librdkafka) on the same broker,
/// same message sizes and same producer settings (acks=all, idempotent), measured in the same run.
///
/// Usage: kafka-bench BOOTSTRAP [COUNT_1KB] [COUNT_18KB]. Needs `kcat` on PATH and the same librdkafka for both
/// (scripts/services.sh env sets LD_LIBRARY_PATH).
@main
struct KafkaBench {
    static func main() async throws {
        let arguments = BenchArguments(usage: "kafka-bench BOOTSTRAP [COUNT_1KB] [COUNT_18KB]", required: 1)
        let bootstrap = arguments[1]
        let small = arguments.int(2, default: 50_000)
        let large = arguments.int(3, default: 5_000)
        var logger = Logger(label: "kafka-bench")
        logger.logLevel = .warning
        print("kafka-bench: librdkafka \(Librdkafka.version), broker \(bootstrap)")
        print("size     direction   ours msg/s   kcat msg/s   ratio")
        for (size, count) in [(1_024, small), (18 * 1_024, large)] {
            let payload = [UInt8](repeating: UInt8(ascii: "x"), count: size)
            let run = UUID().uuidString.prefix(8)
            let oursTopic = "bench-ours-\(size)-\(run)"
            let kcatTopic = "bench-kcat-\(size)-\(run)"
            let admin = try KafkaAdminClient(configuration: KafkaClientConfiguration(bootstrapServers: [bootstrap]), logger: logger)
            _ = try await admin.createTopics([.init(name: oursTopic, partitions: 6), .init(name: kcatTopic, partitions: 6)])
            await admin.close()

            // Produce: ours, fire-and-forget with delivery reports, then flush (as kcat -P does).
            var configuration = KafkaProducerConfiguration(client: KafkaClientConfiguration(bootstrapServers: [bootstrap]))
            configuration.deliveryTimeoutMilliseconds = 60_000
            let producer = try KafkaProducer(configuration: configuration, logger: logger)
            let oursProduce = try await measure {
                for index in 0..<count {
                    while true {
                        do {
                            try producer.send(KafkaProducerMessage(topic: oursTopic, key: Array(String(index).utf8), value: payload))
                            break
                        } catch let error as KafkaError where error.isRetriable {
                            try await Task.sleep(for: .milliseconds(1))  // local queue full: let deliveries catch up
                        }
                    }
                }
                try await producer.flush(timeoutMilliseconds: 120_000)
            }
            await producer.close()

            // Produce: kcat, one message per line from a file.
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("kafka-bench-\(run).txt")
            var lines = Data(capacity: (size + 1) * count)
            for _ in 0..<count { lines.append(contentsOf: payload); lines.append(0x0A) }
            try lines.write(to: file)
            let kcatProduce = try measureBlocking {
                try kcat(["-P", "-b", bootstrap, "-t", kcatTopic, "-X", "acks=all", "-X", "enable.idempotence=true", "-X", "linger.ms=5",
                          "-X", "compression.type=lz4", "-l", file.path])
            }
            try? FileManager.default.removeItem(at: file)

            // Consume everything from the beginning.
            var consumerConfiguration = KafkaConsumerConfiguration(client: KafkaClientConfiguration(bootstrapServers: [bootstrap]), groupId: "bench-\(run)-\(size)")
            consumerConfiguration.sessionTimeoutMilliseconds = 2_000
            consumerConfiguration.heartbeatIntervalMilliseconds = 300
            let consumer = try KafkaConsumer(configuration: consumerConfiguration, topics: [oursTopic], logger: logger)
            // Join the group first, so both sides measure fetching only.
            var received = 0
            while received == 0 { if try await consumer.poll(timeoutMilliseconds: 100) != nil { received = 1 } }
            let oursConsume = try await measure {
                while received < count {
                    received += try await consumer.pollBatch(maximum: 1_000, timeoutMilliseconds: 100).count
                }
            }
            await consumer.close()
            let kcatConsume = try measureBlocking {
                try kcat(["-C", "-b", bootstrap, "-t", kcatTopic, "-o", "beginning", "-e", "-q", "-c", String(count), "-f", "%o\\n"], discardOutput: true)
            }
            for (direction, ours, reference, messages) in [("produce", oursProduce, kcatProduce, count), ("consume", oursConsume, kcatConsume, count - 1)] {
                let oursRate = Double(messages) / ours
                let kcatRate = Double(messages) / reference
                let label = "\(size / 1024) KB".padding(toLength: 8, withPad: " ", startingAt: 0) + " " + direction.padding(toLength: 9, withPad: " ", startingAt: 0)
                print(label + String(format: " %12.0f %12.0f %7.2f", oursRate, kcatRate, oursRate / kcatRate))
            }
        }
        print("target: ours within 0.8 of kcat (ratio >= 0.80). kcat's consume time includes its start-up and group-less assign.")
    }

    static func measure(isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> Void) async throws -> Double {
        let start = ContinuousClock.now
        try await body()
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    static func measureBlocking(_ body: () throws -> Void) throws -> Double {
        let start = ContinuousClock.now
        try body()
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    static func kcat(_ arguments: [String], discardOutput: Bool = false) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["kcat"] + arguments
        process.standardOutput = discardOutput ? FileHandle.nullDevice : FileHandle.standardOutput
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw BenchError(message: "kcat \(arguments.first ?? "") exited with \(process.terminationStatus)") }
    }
}

struct BenchError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
