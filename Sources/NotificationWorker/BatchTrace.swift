import AppStoreNotifications
import EntitlementStore
import KafkaClient
import ServiceRuntime
import Tracing

/// The spans of one batch, when tracing is on (OpenTelemetry's messaging conventions for batch consumers): one
/// `process` span for the batch, a new trace that links to every record's context; and one `process` span per record,
/// a child of the context its record carries (ingest's send, the pull side's command, a re-drive), so each
/// notification is one trace from Apple's POST on. A record's span holds its verification and the batch transaction
/// as children, says the outcome (`applied`, `unchanged`, `duplicate`, `dead-lettered`), and is what its outbox rows,
/// its dead letter and its delivery row keep. With tracing off, nothing is created.
struct BatchTrace: Sendable {
    let batch: (any Span)?
    let records: [(any Span)?]

    static let off = BatchTrace(batch: nil, records: [])

    init(batch: (any Span)?, records: [(any Span)?]) {
        self.batch = batch
        self.records = records
    }

    init(_ messages: [KafkaConsumerMessage], consumerGroup: String) {
        guard PipelineTracing.isTracing, let first = messages.first else {
            self = .off
            return
        }
        let contexts = messages.map(\.headers.extractedContext)
        let batch = startSpan("process \(first.topic)", context: .topLevel, ofKind: .consumer)
        batch.attributes.messaging(operation: "process", destination: first.topic, consumerGroup: consumerGroup)
        batch.attributes["messaging.batch.message_count"] = messages.count
        for context in contexts { batch.addLink(SpanLink(context: context, attributes: [:])) }
        var records: [(any Span)?] = []
        records.reserveCapacity(messages.count)
        for (message, context) in zip(messages, contexts) {
            let span = startSpan("process \(message.topic)", context: context, ofKind: .consumer)
            span.attributes.messaging(operation: "process", destination: message.topic, consumerGroup: consumerGroup)
            span.attributes.messaging(partition: message.partition, offset: message.offset)
            span.addLink(SpanLink(context: batch.context, attributes: [:]))
            records.append(span)
        }
        self.init(batch: batch, records: records)
    }

    var isOn: Bool { batch != nil }

    func context(of index: Int) -> ServiceContext? { isOn ? records[index]?.context : nil }

    func traceparent(of index: Int) -> String? { context(of: index).flatMap(PipelineTracing.traceparent(of:)) }

    /// Runs `work` in a `verify` span under the record's span (its log lines carry the trace).
    func verifying<Result: Sendable>(_ index: Int, _ work: () async -> Result) async -> Result {
        guard let context = context(of: index) else { return await work() }
        return await withSpan("verify", context: context, ofKind: .internal) { _ in await work() }
    }

    /// Names the record's notification on its span (identifiers and type only).
    func describe(_ index: Int, uuid: String?, type: String?, subtype: String?) {
        guard let span = isOn ? records[index] : nil else { return }
        span.attributes["appstore.notification.uuid"] = uuid
        span.attributes["appstore.notification.type"] = type
        span.attributes["appstore.notification.subtype"] = subtype
    }

    /// Ends every span: each record's with its outcome and, for those the transaction wrote, a database span from
    /// `transactionStart` to now (the batch's one transaction, seen from each notification's trace).
    func finish(outcomes: [String?], transactionStart: DefaultTracerClock.Instant, rows: Int, error: String? = nil) {
        guard let batch else { return }
        let end = DefaultTracerClock.now
        let transaction = startSpan("apply notifications", context: batch.context, ofKind: .client, at: transactionStart)
        transaction.attributes.database(operation: "apply notifications", rows: rows)
        transaction.end(at: end)
        for (span, outcome) in zip(records, outcomes) {
            guard let span else { continue }
            if let outcome {
                span.attributes["appstore.notification.outcome"] = outcome
                if outcome != "dead-lettered" {
                    let write = startSpan("apply notifications", context: span.context, ofKind: .client, at: transactionStart)
                    write.attributes.database(operation: "apply notifications", rows: rows)
                    write.end(at: end)
                }
            }
            if let error { span.setStatus(SpanStatus(code: .error, message: error)) }
            span.end(at: end)
        }
        if let error { batch.setStatus(SpanStatus(code: .error, message: error)) }
        batch.end(at: end)
    }
}
