import KafkaClient
import Logging

/// Creates producers for the executables (which do not import KafkaClient themselves).
public enum KafkaProducerFactory {
    public static func make(_ configuration: KafkaProducerConfiguration, logger: Logger) throws -> KafkaProducer {
        try KafkaProducer(configuration: configuration, logger: logger)
    }
}
