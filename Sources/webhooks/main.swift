import ServiceRuntime
import Webhooks

// webhooks: read configuration, build, run (ServiceProcess). Logic lives in Webhooks.
await ServiceProcess.run(name: "webhooks", help: WebhooksConfiguration.help) { logger, registry in
    let configuration = try WebhooksConfiguration.fromEnvironment()
    let services = try buildWebhooksServices(configuration: configuration, registry: registry, logger: logger)
    return .init(services: services.services, metadata: [
        "topic": "\(configuration.eventsTopic)", "group": "\(configuration.groupId)", "ops": "\(configuration.opsHost):\(configuration.opsPort)",
        "privateTargets": "\(configuration.allowPrivateTargets)",
    ])
}
