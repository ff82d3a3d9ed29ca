import Console
import ServiceRuntime

// console: read configuration, build, run (ServiceProcess). Logic lives in Console.
await ServiceProcess.run(name: "console", help: ConsoleConfiguration.help) { logger, registry in
    let configuration = try ConsoleConfiguration.fromEnvironment()
    return .init(services: try buildConsoleServices(configuration: configuration, registry: registry, logger: logger), metadata: [
        "address": "\(configuration.host):\(configuration.port)", "ops": "\(configuration.host):\(configuration.opsPort)",
        "allowHTTP": "\(configuration.allowHTTP)",
    ])
}
