import NotificationIngest
import ServiceRuntime

// ingest: read configuration, build, run (ServiceProcess, as its siblings). Logic lives in NotificationIngest.
await ServiceProcess.run(name: "ingest", help: IngestConfiguration.help) { logger, registry in
    let configuration = try IngestConfiguration.fromEnvironment()
    return .init(services: try buildIngestServices(configuration: configuration, registry: registry, logger: logger), metadata: [
        "address": "\(configuration.host):\(configuration.port)", "path": "\(configuration.notificationPath)", "topic": "\(configuration.topic)",
    ])
}
