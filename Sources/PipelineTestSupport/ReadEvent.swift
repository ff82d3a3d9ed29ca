import AppStoreNotifications
import Foundation
import KafkaClient
import PipelineOperations
import PostgresNIO
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// One event as read from the topic.
public struct ReadEvent {
    public var id: String
    public var type: String
    public var subject: String
    public var sequence: Int64?
    public var headers: [String: String]
    public var data: JSONObject
    public var after: JSONObject? { data["after"]?.objectValue }
    public var before: JSONObject? { data["before"]?.objectValue }

    public init?(_ record: KafkaConsumerMessage) {
        guard let id = record.headers.string(CloudEventsHeader.id), let data = try? StrictJSONParser().parseObject(record.value) else { return nil }
        self.id = id
        type = record.headers.string(CloudEventsHeader.type) ?? ""
        subject = record.headers.string(CloudEventsHeader.subject) ?? ""
        sequence = data["sequence"]?.int64Value
        headers = Dictionary(record.headers.compactMap { header in header.stringValue.map { (header.key, $0) } }) { first, _ in first }
        self.data = data
    }

    /// Reads the events topic until it holds at least `count` distinct ids (or 90 s pass).
    public static func readAll(_ fixture: WorkerProcessFixture, topic: String, atLeast count: Int) async throws -> [ReadEvent] {
        let deadline = ContinuousClock.now + .seconds(90)
        var events: [ReadEvent] = []
        repeat {
            let records = try await TopicReader.readAll(topic, client: KafkaClientConfiguration(bootstrapServers: [fixture.bootstrap]), logger: ingestTestLogger)
            events = records.compactMap(ReadEvent.init)
            if Set(events.map(\.id)).count >= count { break }
            try await Task.sleep(for: .milliseconds(500))
        } while ContinuousClock.now < deadline
        return events
    }
}
