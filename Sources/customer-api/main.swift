import CustomerAPI
import ServiceRuntime

// customer-api: read configuration, build, run (ServiceProcess). Logic lives in CustomerAPI.
await ServiceProcess.run(name: "customer-api", help: CustomerAPIConfiguration.help) { logger, registry in
    let configuration = try CustomerAPIConfiguration.fromEnvironment()
    let services = try buildCustomerAPIServices(configuration: configuration, registry: registry, logger: logger)
    return .init(services: services.services, metadata: [
        "address": "\(configuration.host):\(configuration.port)", "ops": "\(configuration.host):\(configuration.opsPort)",
        "topic": "\(configuration.shared.topic)", "policy": "\(configuration.ownershipPolicy.rawValue)",
    ])
}
