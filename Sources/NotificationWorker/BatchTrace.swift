import KafkaClient
import ServiceRuntime
import Tracing

/// The spans of one batch, when tracing is on (OpenTelemetry's messaging conventions for batch consumers): one
/// `process` span for the batch, a new trace that links to every record's context, with the batch transaction as a
/// database span under it; and one `process` span per record, a child of the context its record carries (ingest's
/// send, the pull side's command, a re-drive), so each notification is one trace from Apple's POST on. A record's
/// span runs from its verification (ended by a `verified` event) to the commit of the transaction that wrote it and its
/// outbox rows (its `db.*` attributes say so), says the outcome (`applied`, `unchanged`, `duplicate`,
/// `dead-lettered`), and is what its outbox rows, its dead letter and its delivery row keep. With tracing off,
/// nothing is created.
///
/// Attributes are written once per span (`updateAttributes`): a span's attributes are copied under its lock on every
/// write, so one write per attribute cost more than the spans themselves (worker-bench).
struct BatchTrace: Sendable {
    let batch: (any Span)?
    let records: [(any Span)?]

    /// What a record's notification is (identifiers and type only), for its span.
    struct Description {
        var uuid: String?
        var type: String?
        var subtype: String?
        var outcome: String?
    }

    static var off: BatchTrace { BatchTrace(batch: nil, records: []) }

    init(batch: (any Span)?, records: [(any Span)?]) {
        self.batch = batch
        self.records = records
    }

    init(_ messages: [KafkaConsumerMessage], consumerGroup: String) {
        guard PipelineTracing.isTracing, let first = messages.first else {
            self.init(batch: nil, records: [])
            return
        }
        let contexts = messages.map(\.headers.extractedContext)
        let batch = startSpan("process \(first.topic)", context: .topLevel, ofKind: .consumer)
        batch.updateAttributes { attributes in
            attributes.messaging(operation: "process", destination: first.topic, consumerGroup: consumerGroup)
            attributes["messaging.batch.message_count"] = messages.count
        }
        for context in contexts { batch.addLink(SpanLink(context: context, attributes: [:])) }
        var records: [(any Span)?] = []
        records.reserveCapacity(messages.count)
        for (message, context) in zip(messages, contexts) {
            let span = startSpan("process \(message.topic)", context: context, ofKind: .consumer)
            span.updateAttributes { attributes in
                attributes.messaging(operation: "process", destination: message.topic, consumerGroup: consumerGroup)
                attributes.messaging(partition: message.partition, offset: message.offset)
            }
            span.addLink(SpanLink(context: batch.context, attributes: [:]))
            records.append(span)
        }
        self.init(batch: batch, records: records)
    }

    var isOn: Bool { batch != nil }

    func context(of index: Int) -> ServiceContext? { isOn ? records[index]?.context : nil }

    func traceparent(of index: Int) -> String? { context(of: index).flatMap(PipelineTracing.traceparent(of:)) }

    /// Runs `work` in the record's context (its log lines carry the trace) and marks its end on the record's span with
    /// a `verified` event: the record's span starts with its verification, so the event's time is its duration. An
    /// event, not a child span: a span costs an id from the system's random source, a lock and an exported message of
    /// its own, and a child span here cost more than the rest of the record's tracing (worker-bench).
    func verifying<Result: Sendable>(_ index: Int, _ work: () async -> Result) async -> Result {
        guard let span = isOn ? records[index] : nil else { return await work() }
        let result = await ServiceContext.$current.withValue(span.context) { await work() }
        span.addEvent(SpanEvent(name: "verified"))
        return result
    }

    /// Ends every span: each record's with its description and outcome (and, for those the transaction wrote, the
    /// transaction's `db.*` attributes), and a database span under the batch's from `transactionStart` to now.
    func finish(_ descriptions: [Description], transactionStart: DefaultTracerClock.Instant, rows: Int, error: String? = nil) {
        guard let batch else { return }
        let end = DefaultTracerClock.now
        let transaction = startSpan("apply notifications", context: batch.context, ofKind: .client, at: transactionStart)
        transaction.updateAttributes { $0.database(operation: "apply notifications", rows: rows) }
        transaction.end(at: end)
        for (span, description) in zip(records, descriptions) {
            guard let span else { continue }
            span.updateAttributes { attributes in
                attributes["appstore.notification.uuid"] = description.uuid
                attributes["appstore.notification.type"] = description.type
                attributes["appstore.notification.subtype"] = description.subtype
                attributes["appstore.notification.outcome"] = description.outcome
                if let outcome = description.outcome, outcome != "dead-lettered" { attributes.database(operation: "apply notifications", rows: rows) }
            }
            if let error { span.setStatus(SpanStatus(code: .error, message: error)) }
            span.end(at: end)
        }
        if let error { batch.setStatus(SpanStatus(code: .error, message: error)) }
        batch.end(at: end)
    }
}
