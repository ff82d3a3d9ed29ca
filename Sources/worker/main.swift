import NotificationWorker
import ServiceRuntime

// worker: read configuration, build, run (ServiceProcess). Logic lives in NotificationWorker. A fatal consumer
// error (or another service's failure) exits non-zero, so the orchestrator replaces the process.
await ServiceProcess.run(name: "worker", help: WorkerConfiguration.help) { logger, registry in
    let configuration = try WorkerConfiguration.fromEnvironment()
    let services = try buildWorkerServices(configuration: configuration, registry: registry, logger: logger)
    return .init(services: services.services, metadata: [
        "topic": "\(configuration.topic)", "group": "\(configuration.groupId)", "deadLetterTopic": "\(configuration.deadLetterTopic)",
        "apps": "\(configuration.apps.map { $0.bundleId ?? "*" })", "ops": "\(configuration.opsHost):\(configuration.opsPort)",
    ])
}
