import Instrumentation
import ServiceContextModule

/// Trace context across a Kafka hop (W3C Trace Context: `traceparent`, `tracestate`) in a record's headers. What goes
/// in is what the instrument writes; with no instrument bootstrapped (tracing off) nothing is written or read.
public struct KafkaHeadersInjector: Injector {
    public init() {}

    public func inject(_ value: String, forKey key: String, into headers: inout [KafkaHeader]) {
        headers.removeAll { $0.key == key }
        headers.append(KafkaHeader(key: key, string: value))
    }
}

/// Reads trace context from a consumed record's headers (the first header of each name).
public struct KafkaHeadersExtractor: Extractor {
    public init() {}

    public func extract(key: String, from headers: [KafkaHeader]) -> String? { headers.string(key) }
}

extension Array where Element == KafkaHeader {
    /// These headers with `context` injected by the bootstrapped instrument (unchanged when tracing is off).
    public func injecting(_ context: ServiceContext?) -> [KafkaHeader] {
        guard let context else { return self }
        var headers = self
        InstrumentationSystem.instrument.inject(context, into: &headers, using: KafkaHeadersInjector())
        return headers
    }

    /// The trace context these headers carry, if any (a context with no trace when tracing is off).
    public var extractedContext: ServiceContext {
        var context = ServiceContext.topLevel
        InstrumentationSystem.instrument.extract(self, into: &context, using: KafkaHeadersExtractor())
        return context
    }
}
