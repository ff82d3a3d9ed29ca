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
package struct ReadEvent {
    package var id: String
    package var type: String
    package var subject: String
    package var sequence: Int64?
    package var headers: [String: String]
    package var data: JSONObject
    package var after: JSONObject? { data["after"]?.objectValue }
    package var before: JSONObject? { data["before"]?.objectValue }

    package init?(_ record: KafkaConsumerMessage) {
        guard let id = record.headers.string(CloudEventsHeader.id), let data = try? StrictJSONParser().parseObject(record.value) else { return nil }
        self.id = id
        type = record.headers.string(CloudEventsHeader.type) ?? ""
        subject = record.headers.string(CloudEventsHeader.subject) ?? ""
        sequence = data["sequence"]?.int64Value
        headers = Dictionary(record.headers.compactMap { header in header.stringValue.map { (header.key, $0) } }) { first, _ in first }
        self.data = data
    }

    /// Reads the events topic until it holds at least `count` distinct ids (or 90 s pass).
    package static func readAll(_ fixture: WorkerProcessFixture, topic: String, atLeast count: Int) async throws -> [ReadEvent] {
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
