import AppStoreNotifications
@testable import CustomerAPI
import EntitlementEvents
import EntitlementStore
import Foundation
import KafkaClient
import NotificationRecords
import Prometheus
import SharedSettings
import SubscriptionMetrics
import TestSupport
import Testing
@testable import Webhooks
import Console

@testable import NotificationIngest
@testable import NotificationWorker
@testable import PipelineOperations
@testable import ServiceRuntime
import PipelineTestSupport

/// No Docker engine or Kubernetes cluster exists where the tests run, so the deployment files are checked
/// against the code instead: every variable they set is one the process reads, every command names one of our
/// executables (and a pipelinectl subcommand that exists), every port is the one the process listens on, every
/// probe and scrape path is one of the services' routes, and every metric the dashboard plots is exported.
@Suite("Deployment files match the services")
struct DeploymentConsistencyTests {
    /// The executables the image holds, and the environment variables each reads.
    static let processes: [String: [String]] = [
        "ingest": IngestConfiguration.environmentKeys,
        "worker": WorkerConfiguration.environmentKeys,
        "customer-api": CustomerAPIConfiguration.environmentKeys,
        "webhooks": WebhooksConfiguration.environmentKeys,
        "console": ConsoleConfiguration.environmentKeys,
        "pipelinectl": OperationsConfiguration.environmentKeys,
    ]
    static let routes = [OperationsRoutes.live, OperationsRoutes.ready, OperationsRoutes.metrics]
    /// Secrets referenced with `optional: true` that no manifest defines (the operator creates them), and their keys.
    static let optionalSecrets = ["appstore-pipeline-read-replicas": ["POSTGRES_READ_URL"]]
    static let defaultIngestPort = IngestConfiguration(kafka: .init(bootstrapServers: ["x"], clientId: "x")).port
    static let defaultWorkerPort = WorkerConfiguration(kafka: .init(bootstrapServers: ["x"], clientId: "x")).opsPort
    static let defaultCustomerAPI = CustomerAPIConfiguration(shared: PipelineSettings(kafka: .init(bootstrapServers: ["x"], clientId: "x")))
    static let defaultWebhooksPort = WebhooksConfiguration(kafka: .init(bootstrapServers: ["x"], clientId: "x")).opsPort
    static let defaultConsole = ConsoleConfiguration(shared: PipelineSettings(kafka: .init(bootstrapServers: ["x"], clientId: "x")))

    /// The ports a service process listens on (`all`) and the one serving `/health/*` and `/metrics` (`ops`),
    /// from its environment and defaults; nil for a process that serves nothing (pipelinectl).
    static func ports(of executable: String, environment: [String: String]) -> (all: [Int], ops: Int)? {
        guard let listeners = listeners[executable] else { return nil }
        let all = listeners.map { variable, port in environment[variable].flatMap(Int.init) ?? port }
        return (all, all[all.count - 1])
    }

    /// Each service's listening ports: the variable that sets it and its default; the last one serves the ops routes.
    static let listeners: [String: [(String, Int)]] = [
        "ingest": [("INGEST_PORT", defaultIngestPort)],
        "worker": [("WORKER_OPS_PORT", defaultWorkerPort)],
        "customer-api": [("CUSTOMER_API_PORT", defaultCustomerAPI.port), ("CUSTOMER_API_OPS_PORT", defaultCustomerAPI.opsPort)],
        "webhooks": [("WEBHOOKS_OPS_PORT", defaultWebhooksPort)],
        "console": [("CONSOLE_PORT", defaultConsole.port), ("CONSOLE_OPS_PORT", defaultConsole.opsPort)],
    ]

    static func reads(_ process: String, _ variable: String) -> Bool {
        // Every process of ours reads the tracing variables (ServiceProcess, pipelinectl's traced commands).
        if processes[process] != nil, PipelineTracing.variables.contains(variable) { return true }
        return (processes[process] ?? []).contains { key in
            key.hasSuffix("*") ? variable.hasPrefix(key.dropLast()) && variable.count > key.count - 1 : key == variable
        }
    }

    /// The executables a container command runs (`["worker"]`, or each step of `sh -c "a && b"`), with their arguments.
    static func invocations(_ command: [String]) -> [[String]] {
        if command.count == 3, command[0] == "sh", command[1] == "-c" {
            return command[2].components(separatedBy: "&&").map { $0.split(separator: " ").map(String.init) }
        }
        return [command]
    }

    /// A pipelinectl invocation must name a real subcommand path: `--help` of it succeeds.
    static func checkPipelinectl(_ arguments: [String], in file: String) throws {
        let binary = repositoryRoot.appendingPathComponent(".build/debug/pipelinectl").path
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build pipelinectl first (scripts/test.sh does)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = Array(arguments.dropFirst().prefix { !$0.hasPrefix("-") }) + ["--help"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(file): `\(arguments.joined(separator: " "))` is not a pipelinectl command")
    }

    /// `http://localhost:8080/health/ready` → (8080, "/health/ready").
    static func portAndPath(ofURL text: String) -> (Int, String)? {
        guard let url = URL(string: text), let port = url.port else { return nil }
        return (port, url.path)
    }

    // MARK: - docker-compose.yml

    @Test("docker-compose.yml: variables, executables, ports, health checks and scrape targets")
    func compose() throws {
        let compose = try #require(try YAMLFile.load("docker-compose.yml").first as? [String: Any])
        let services = try #require(compose["services"] as? [String: [String: Any]])
        var portOf: [String: Int] = [:]
        var ours = 0
        for (name, service) in services.sorted(by: { $0.key < $1.key }) where service["build"] != nil {
            ours += 1
            let command = try #require(service["command"] as? [String], "\(name) has no command")
            let environment = service["environment"] as? [String: Any] ?? [:]
            let runs = Self.invocations(command)
            for invocation in runs {
                let executable = try #require(invocation.first)
                #expect(Self.processes[executable] != nil, "compose service \(name) runs \(executable), which the image does not hold")
                if executable == "pipelinectl" { try Self.checkPipelinectl(invocation, in: "docker-compose.yml \(name)") }
            }
            for variable in environment.keys.sorted() {
                #expect(runs.contains { Self.reads($0[0], variable) }, "compose service \(name) sets \(variable), which \(runs.map { $0[0] }) never read")
            }
            let executable = runs[0][0]
            let listening = Self.ports(of: executable, environment: environment.compactMapValues { $0 as? String })
            let port = listening?.ops
            if let port { portOf[name] = port }
            for published in service["ports"] as? [String] ?? [] {
                let target = published.split(separator: ":").last.flatMap { Int($0) }
                #expect(target.map { listening?.all.contains($0) ?? false } == true, "\(name) publishes \(published) but listens on \(listening?.all.map(String.init) ?? ["nothing"])")
            }
            if let check = (service["healthcheck"] as? [String: Any])?["test"] as? [String], let url = check.first(where: { $0.hasPrefix("http") }) {
                let target = try #require(Self.portAndPath(ofURL: url))
                #expect(target.0 == port, "\(name)'s health check calls port \(target.0), the process listens on \(port.map(String.init) ?? "nothing")")
                #expect([OperationsRoutes.live, OperationsRoutes.ready].contains(target.1), "\(name)'s health check calls \(target.1), not a health route")
            }
        }
        #expect(ours == 7, "migrate, ingest, worker, customer-api, webhooks, console and the catch-up backfill are built from the image")
        #expect((services["webhooks"]?["deploy"] as? [String: Any])?["replicas"] as? Int == 2, "the webhooks service is scaled horizontally")
        #expect((services["customer-api"]?["deploy"] as? [String: Any])?["replicas"] as? Int == 2, "the customer API is scaled horizontally")
        #expect(services["catch-up"]?["profiles"] as? [String] == ["catch-up"], "the catch-up needs a key: off unless its profile is asked for")
        #expect((services["worker"]?["deploy"] as? [String: Any])?["replicas"] as? Int == 3)

        // Prometheus scrapes each of our services on its port and metrics path.
        let prometheus = try #require(try YAMLFile.load("deploy/prometheus/prometheus.yml").first as? [String: Any])
        let jobs = try #require(prometheus["scrape_configs"] as? [[String: Any]])
        var scraped: Set<String> = []
        for job in jobs {
            #expect(job["metrics_path"] as? String == OperationsRoutes.metrics)
            for discovery in job["dns_sd_configs"] as? [[String: Any]] ?? [] {
                for name in discovery["names"] as? [String] ?? [] {
                    scraped.insert(name)
                    #expect(discovery["port"] as? Int == portOf[name], "Prometheus scrapes \(name) on \(discovery["port"] ?? "?"), it serves /metrics on \(portOf[name].map(String.init) ?? "nothing")")
                }
            }
        }
        #expect(scraped == Set(portOf.keys), "every service with /metrics is scraped")
    }

    // MARK: - Kubernetes

    @Test("pod memory limits hold the benchmarks' measured peak with headroom, and librdkafka's queues fit below them")
    func memoryLimits() throws {
        let figures = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: repositoryRoot.appendingPathComponent("deploy/measured-memory.json"))) as? [String: Any])
        for (file, process) in [("deploy/kubernetes/worker.yaml", "worker"), ("deploy/kubernetes/ingest.yaml", "ingest")] {
            let figure = try #require(figures[process] as? [String: Any])
            let peak = try #require(figure["residentMegabytesPeak"] as? Double)
            let queue = try #require(figure["librdkafkaQueueMegabytes"] as? Double)
            let deployment = try #require(try YAMLFile.load(file).compactMap { $0 as? [String: Any] }.first { ["Deployment", "StatefulSet"].contains($0["kind"] as? String) })
            let podSpec = try #require(((deployment["spec"] as? [String: Any])?["template"] as? [String: Any])?["spec"] as? [String: Any])
            let container = try #require((podSpec["containers"] as? [[String: Any]])?.first)
            let limit = try #require(((container["resources"] as? [String: Any])?["limits"] as? [String: Any])?["memory"] as? String)
            let megabytes = try #require(Self.megabytes(limit), "\(file): memory limit \(limit)")
            #expect(megabytes >= peak * 1.5 + queue, "\(file): limit \(limit) below 1.5 x the measured \(peak) MB + the \(queue) MB queue")
        }
        // The queue bounds the figures assume are the ones the processes configure.
        // The worker's pre-fetch follows its batch size (WorkerConfiguration.consumerConfiguration), rounded up.
        let workerPrefetch = WorkerConfiguration(kafka: .init(bootstrapServers: ["x"], clientId: "c")).consumerConfiguration.maximumPrefetchKilobytes
        #expect((workerPrefetch + 1023) / 1024 == Int((figures["worker"] as? [String: Any])?["librdkafkaQueueMegabytes"] as? Double ?? 0))
        #expect(KafkaProducerConfiguration(client: .init(bootstrapServers: ["x"])).maximumQueuedKilobytes / 1024 == Int((figures["ingest"] as? [String: Any])?["librdkafkaQueueMegabytes"] as? Double ?? 0))
    }

    /// `512Mi`, `1Gi`, `300M` in megabytes.
    static func megabytes(_ quantity: String) -> Double? {
        for (suffix, factor) in [("Gi", 1024.0 * 1.048576), ("Mi", 1.048576), ("G", 1000.0), ("M", 1.0)] where quantity.hasSuffix(suffix) {
            return Double(quantity.dropLast(suffix.count)).map { $0 * factor }
        }
        return nil
    }

    @Test("Kubernetes manifests: variables, executables, ports, probes, scaling objects")
    func kubernetes() throws {
        let directory = "deploy/kubernetes"
        let files = try FileManager.default.contentsOfDirectory(atPath: repositoryRoot.appendingPathComponent(directory).path)
            .filter { $0.hasSuffix(".yaml") && $0 != "kustomization.yaml" }.sorted()
        var objects: [[String: Any]] = []
        for file in files { objects += try YAMLFile.load("\(directory)/\(file)").compactMap { $0 as? [String: Any] } }
        func named(_ kind: String) -> [[String: Any]] { objects.filter { $0["kind"] as? String == kind } }
        func name(_ object: [String: Any]) -> String { (object["metadata"] as? [String: Any])?["name"] as? String ?? "?" }

        // Every file is listed in the kustomization.
        let kustomization = try #require(try YAMLFile.load("\(directory)/kustomization.yaml").first as? [String: Any])
        #expect(Set(kustomization["resources"] as? [String] ?? []) == Set(files))

        var configKeys: [String: [String]] = [:]
        for object in named("ConfigMap") { configKeys[name(object)] = (object["data"] as? [String: Any] ?? [:]).keys.sorted() }
        for object in named("Secret") { configKeys[name(object)] = (object["stringData"] as? [String: Any] ?? object["data"] as? [String: Any] ?? [:]).keys.sorted() }
        var keyReaders: [String: Set<String>] = [:]  // config key → executables that receive it
        var deploymentPorts: [String: Int] = [:]

        var envFromReferences: Set<String> = []
        for object in named("Deployment") + named("StatefulSet") + named("Job") + named("CronJob") {
            let outerSpec = try #require(object["spec"] as? [String: Any])
            // A CronJob's pod template is one level deeper, in its job template.
            let spec = ((outerSpec["jobTemplate"] as? [String: Any])?["spec"] as? [String: Any]) ?? outerSpec
            let template = try #require(spec["template"] as? [String: Any])
            let podSpec = try #require(template["spec"] as? [String: Any])
            for container in podSpec["containers"] as? [[String: Any]] ?? [] {
                let command = try #require(container["command"] as? [String], "\(name(object)) has no command")
                let runs = Self.invocations(command)
                for invocation in runs {
                    #expect(Self.processes[invocation[0]] != nil, "\(name(object)) runs \(invocation[0]), which the image does not hold")
                    if invocation[0] == "pipelinectl" { try Self.checkPipelinectl(invocation, in: name(object)) }
                }
                let executables = runs.map { $0[0] }
                var environment: [String: String] = [:]
                for variable in container["env"] as? [[String: Any]] ?? [] {
                    let key = try #require(variable["name"] as? String)
                    environment[key] = variable["value"] as? String
                    #expect(executables.contains { Self.reads($0, key) }, "\(name(object)) sets \(key), which \(executables) never read")
                }
                for source in container["envFrom"] as? [[String: Any]] ?? [] {
                    let reference = (source["configMapRef"] ?? source["secretRef"]) as? [String: Any]
                    let referenced = try #require(reference?["name"] as? String)
                    if reference?["optional"] as? Bool == true, let keys = Self.optionalSecrets[referenced] {
                        // A Secret the operator creates when they want it (docs/deployment.md): each of its keys is read
                        // by every process that references it.
                        for key in keys { #expect(executables.allSatisfy { Self.reads($0, key) }, "\(name(object)) takes \(key) from \(referenced) but never reads it") }
                        continue
                    }
                    envFromReferences.insert(referenced)
                    let keys = try #require(configKeys[referenced], "\(name(object)) reads \(referenced), which no manifest defines")
                    for key in keys { keyReaders[key, default: []].formUnion(executables.filter { Self.reads($0, key) }) }
                }
                let listening = Self.ports(of: executables[0], environment: environment)
                let port = listening?.ops
                let ports = container["ports"] as? [[String: Any]] ?? []
                #expect(ports.map { $0["containerPort"] as? Int } == (listening?.all ?? []).map { Optional($0) }, "\(name(object)): containerPort \(ports) vs the process's \(listening?.all ?? [])")
                if let port { deploymentPorts[name(object)] = port }
                for probeName in ["readinessProbe", "livenessProbe"] {
                    guard let probe = (container[probeName] as? [String: Any])?["httpGet"] as? [String: Any] else {
                        #expect(port == nil, "\(name(object)) has no \(probeName)")
                        continue
                    }
                    let expected = probeName == "readinessProbe" ? OperationsRoutes.ready : OperationsRoutes.live
                    #expect(probe["path"] as? String == expected, "\(name(object)) \(probeName) calls \(probe["path"] ?? "?")")
                    let probePort = probe["port"] as? Int ?? ports.first { $0["name"] as? String == probe["port"] as? String }?["containerPort"] as? Int
                    #expect(probePort == port, "\(name(object)) \(probeName) on port \(probePort.map(String.init) ?? "?")")
                }
                // A file named by a variable lies on a mounted volume of a Secret that exists.
                let mounts = container["volumeMounts"] as? [[String: Any]] ?? []
                let volumes = podSpec["volumes"] as? [[String: Any]] ?? []
                for (key, value) in environment where key.hasSuffix("_FILE") {
                    let mount = mounts.first { value.hasPrefix(($0["mountPath"] as? String ?? "\u{0}") + "/") }
                    let volume = volumes.first { $0["name"] as? String == mount?["name"] as? String }
                    let secretName = (volume?["secret"] as? [String: Any])?["secretName"] as? String
                    let file = String(value.split(separator: "/").last ?? "")
                    #expect(secretName.flatMap { configKeys[$0] }?.contains(file) == true, "\(name(object)): \(key)=\(value) is not a key of a mounted Secret")
                }
                let annotations = ((template["metadata"] as? [String: Any])?["annotations"] as? [String: String]) ?? [:]
                if let scrapePort = annotations["prometheus.io/port"] {
                    #expect(Int(scrapePort) == port && annotations["prometheus.io/path"] == OperationsRoutes.metrics, "\(name(object)) scrape annotations")
                }
            }
        }
        // Every key of a ConfigMap/Secret passed as environment is read by some process that receives it (a
        // Secret mounted as files, like the .p8 key, is checked above).
        for key in configKeys.filter({ envFromReferences.contains($0.key) }).values.flatMap({ $0 }) {
            #expect(!(keyReaders[key] ?? []).isEmpty, "the key \(key) reaches no process that reads it")
        }
        // Ingest has a Service and an HPA; the worker an HPA and a PodDisruptionBudget; a migrate Job exists.
        let scaled = Set(named("HorizontalPodAutoscaler").compactMap { (($0["spec"] as? [String: Any])?["scaleTargetRef"] as? [String: Any])?["name"] as? String })
        #expect(scaled == Set(deploymentPorts.keys), "an HPA for each Deployment and StatefulSet")
        for autoscaler in named("HorizontalPodAutoscaler") {
            let target = ((autoscaler["spec"] as? [String: Any])?["scaleTargetRef"] as? [String: Any]) ?? [:]
            let kinds = Set(objects.filter { name($0) == target["name"] as? String && $0["kind"] as? String != "HorizontalPodAutoscaler" }.compactMap { $0["kind"] as? String })
            #expect(kinds.contains(target["kind"] as? String ?? "?"), "\(name(autoscaler)) scales a \(target["kind"] ?? "?") named \(target["name"] ?? "?"), which is a \(kinds)")
        }
        #expect(named("PodDisruptionBudget").count == 1 && named("Job").count == 1)
        #expect(
            Set(named("Service").map(name)) == ["appstore-ingest", "appstore-customer-api", "appstore-console", "appstore-worker"],
            "ingest, the customer API and the console are reachable as Services; the workers' StatefulSet has its governing one")
        // Workers are static group members named after their pods, so their pods must keep their names: a
        // StatefulSet (a Deployment's new pod has a new name, and the old name's partitions would wait out the
        // session timeout).
        let worker = try #require(named("StatefulSet").first { name($0) == "appstore-worker" }, "the worker runs as a StatefulSet")
        let workerSpec = try #require(worker["spec"] as? [String: Any])
        #expect(named("Deployment").allSatisfy { name($0) != "appstore-worker" })
        #expect(workerSpec["serviceName"] as? String == "appstore-worker" && named("Service").contains { name($0) == "appstore-worker" && ($0["spec"] as? [String: Any])?["clusterIP"] as? String == "None" })
        let workerContainer = try #require(((((workerSpec["template"] as? [String: Any])?["spec"] as? [String: Any])?["containers"] as? [[String: Any]])?.first))
        let instance = (workerContainer["env"] as? [[String: Any]] ?? []).first { $0["name"] as? String == "WORKER_INSTANCE_ID" }
        #expect(((instance?["valueFrom"] as? [String: Any])?["fieldRef"] as? [String: Any])?["fieldPath"] as? String == "metadata.name", "WORKER_INSTANCE_ID is the pod's name")
        #expect(Set(named("PodDisruptionBudget").map(name)) == ["appstore-worker"])
        #expect(Set(named("CronJob").map(name)) == ["appstore-pipeline-catch-up", "appstore-pipeline-reconcile"], "the automatic catch-up and the nightly reconcile")
        for cronJob in named("CronJob") {
            #expect((cronJob["spec"] as? [String: Any])?["concurrencyPolicy"] as? String == "Forbid", "\(name(cronJob)): one pass at a time")
        }
        #expect(deploymentPorts.values.sorted() == [Self.defaultIngestPort, Self.defaultWorkerPort, Self.defaultCustomerAPI.opsPort, Self.defaultWebhooksPort, Self.defaultConsole.opsPort].sorted())
    }

    // MARK: - Interfaces

    @Test("docs/asyncapi.yaml documents every record header the code writes, and every pull record kind")
    func asyncAPI() throws {
        let document = try #require(try YAMLFile.load("docs/asyncapi.yaml").first as? [String: Any])
        let messages = try #require((document["components"] as? [String: Any])?["messages"] as? [String: [String: Any]])
        func headers(_ message: String) -> Set<String> {
            Set(((messages[message]?["headers"] as? [String: Any])?["properties"] as? [String: Any] ?? [:]).keys)
        }
        let notification: Set<String> = [
            NotificationRecordHeader.receivedAt, NotificationRecordHeader.ingestInstance, NotificationRecordHeader.requestId,
            NotificationRecordHeader.environmentHint, NotificationRecordHeader.source, NotificationRecordHeader.sendAttemptResult,
        ]
        #expect(notification.subtracting(headers("appleNotification")).isEmpty, "\(notification.subtracting(headers("appleNotification")))")
        for message in ["statusSnapshot", "historyTransaction", "purchase"] { #expect(headers(message).contains(NotificationRecordHeader.recordKind), "\(message)") }
        let kinds = Set(["statusSnapshot", "historyTransaction", "purchase"].compactMap {
            (((messages[$0]?["headers"] as? [String: Any])?["properties"] as? [String: Any])?[NotificationRecordHeader.recordKind] as? [String: Any])?["const"] as? String
        })
        #expect(kinds == Set(PulledRecordKind.allCases.map(\.rawValue)))
        let deadLetter: Set<String> = [
            DeadLetterHeader.errorCode, DeadLetterHeader.errorReason, DeadLetterHeader.errorCause, DeadLetterHeader.originalTopic,
            DeadLetterHeader.originalPartition, DeadLetterHeader.originalOffset, DeadLetterHeader.originalTimestamp, DeadLetterHeader.consumerGroup,
            DeadLetterHeader.failedAt, DeadLetterHeader.attempt, RedriveHeader.from, RedriveHeader.at, RedriveHeader.count,
        ]
        #expect(deadLetter.subtracting(headers("deadLetter")).isEmpty, "\(deadLetter.subtracting(headers("deadLetter")))")
        for message in ["appleNotification", "statusSnapshot", "historyTransaction", "purchase", "deadLetter"] {
            #expect(headers(message).contains(TraceParent.header), "\(message) does not document traceparent")
        }
        let channels = try #require(document["channels"] as? [String: [String: Any]])
        let defaults = OperationsConfiguration()
        #expect(channels["notifications"]?["address"] as? String == defaults.topic && channels["deadLetters"]?["address"] as? String == defaults.deadLetterTopic)
        #expect(channels["appleNotificationPost"]?["address"] as? String == IngestConfiguration(kafka: .init(bootstrapServers: ["x"], clientId: "x")).notificationPath)
    }

    @Test("docs/asyncapi.yaml lists the events topic, every CloudEvents header the relay sets and every event type")
    func asyncAPIEvents() throws {
        let document = try #require(try YAMLFile.load("docs/asyncapi.yaml").first as? [String: Any])
        let messages = try #require((document["components"] as? [String: Any])?["messages"] as? [String: [String: Any]])
        let properties = try #require((messages["entitlementEvent"]?["headers"] as? [String: Any])?["properties"] as? [String: Any])
        let record = CloudEventRecord.message(
            OutboxEvent(rowId: 1, eventId: "i", type: "entitlement.granted", source: "/apps/b/Sandbox", subject: "s", time: "t", sequence: 1, data: "{}"), topic: "t")
        let set = Set(record.headers.map(\.key))
        #expect(set == Set(CloudEventsHeader.all), "the relay sets exactly the documented list: \(set)")
        #expect(set.isSubset(of: Set(properties.keys)), "undocumented headers: \(set.subtracting(properties.keys))")
        // With tracing on the relay adds the tracing headers: each documented.
        #expect(Set(CloudEventsHeader.tracing).isSubset(of: Set(properties.keys)), "undocumented tracing headers")
        var traced = OutboxEvent(rowId: 1, eventId: "i", type: "entitlement.granted", source: "/apps/b/Sandbox", subject: "s", time: "t", sequence: 1, data: "{}")
        traced.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        #expect(CloudEventRecord.message(traced, topic: "t").headers.string(CloudEventsHeader.traceparent) == traced.traceparent)
        let types = (properties[CloudEventsHeader.type] as? [String: Any])?["enum"] as? [String]
        #expect(Set(types ?? []) == Set(EntitlementEventType.allCases.map(\.rawValue)))
        let channels = try #require(document["channels"] as? [String: [String: Any]])
        #expect(channels["entitlementEvents"]?["address"] as? String == EventsConfiguration().topic)
    }

    @Test("events the code emits validate against docs/entitlement-event.schema.json, every type and cause kind among them")
    func eventSchema() async throws {
        let authority = try TestCertificateAuthority()
        let minter = NotificationMinter(chain: try authority.issueChain())
        let verifier = try SignedPayloadVerifier(
            configuration: .init(apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER]))
        var notifications = NotificationMinter.lifecycleEvents(subscriptions: 10)
        for (index, type) in ["TEST", "REFUND_DECLINED", "CONSUMPTION_REQUEST", "ONE_TIME_CHARGE"].enumerated() {
            var event = NotificationMinter.SubscriptionEvent.sample(seed: 900 + index, type: type)
            if type == "ONE_TIME_CHARGE" { event.productType = "Consumable" }
            notifications.append(event)
        }
        // A prorated refund of a consumable (purchase.one-time.refunded with `revocation`).
        var refund = NotificationMinter.SubscriptionEvent.sample(seed: 910, type: "REFUND")
        refund.productType = "Consumable"
        refund.revocationDate = refund.signedDate - 1_000
        refund.revocationReason = 0
        refund.revocationType = "REFUND_PRORATED"
        refund.revocationPercentage = 40_000
        refund.includesRenewalInfo = false
        refund.includesStatus = false
        notifications.append(refund)
        var states: [String: EntitlementState] = [:]
        var afters: [String: EntitlementSnapshot] = [:]
        var sequences: [String: Int64] = [:]
        var events: [EntitlementEvent] = []
        for event in notifications {
            let verified = try await verifier.verifyNotification(minter.signedNotification(event))
            let cause = EntitlementEventCause(verified, key: event.notificationUUID)
            if let own = EntitlementEvent.ofNotification(verified, cause: cause) { events.append(own) }
            let id = event.originalTransactionId
            guard case .updated(let state) = EntitlementTransition.apply(verified, to: states[id]) else { continue }
            states[id] = state
            if let change = EntitlementEvent.change(of: state, before: afters[id], sequence: (sequences[id] ?? 0) + 1, cause: cause) {
                events.append(change)
                sequences[id] = change.sequence
                afters[id] = EntitlementSnapshot(state, at: change.time)
            }
        }
        // RESCIND_CONSENT (appData, no transaction) and an erasure's customer.erased.
        let consent = try await verifier.verifyNotification(
            minter.signedRescindConsent(notificationUUID: "rescind-1", signedDate: 1_780_000_000_000, appTransactionId: "704100000042"))
        events.append(try #require(EntitlementEvent.ofNotification(consent, cause: EntitlementEventCause(consent, key: "rescind-1"))))
        // A purchase that redeemed an offer we signed.
        var redeeming = NotificationMinter.SubscriptionEvent.sample(seed: 9_301, signedDate: 1_780_000_000_000, type: "SUBSCRIBED")
        redeeming.offerType = 2
        redeeming.offerIdentifier = "loyal_3m"
        let redeemed = try await verifier.verifyNotification(minter.signedNotification(redeeming))
        events.append(try #require(EntitlementEvent.offerRedeemed(
            redeemed, cause: EntitlementEventCause(redeemed, key: redeeming.notificationUUID), nonce: "e5a1c8b2-3c4d-4e5f-8a9b-0c1d2e3f4a5b",
            offerIdentifier: "loyal_3m", customerId: "9f6e1d2c-aaaa-4bbb-8ccc-ddddeeeeffff", issuedAt: Timestamp(millisecondsSince1970: 1_779_999_000_000))))
        events.append(EntitlementEvent.erasure(
            requestId: "privacy-1", bundleId: minter.bundleId, environment: "Production", erasedAt: Timestamp(millisecondsSince1970: 1_780_000_000_000),
            subscriptions: 2, notifications: 9, events: 7))
        #expect(Set(events.map(\.type)) == Set(EntitlementEventType.allCases).subtracting([.transferred]), "every type but transfers (the customer API's, checked in its own tests)")
        #expect(events.contains { $0.data["revocation"] != nil } && events.contains { $0.data["erasure"] != nil } && events.contains { $0.data["offer"] != nil })
        let problems = try JSONSchemaCheck.validate(events.map(\.data.serialized), against: "docs/entitlement-event.schema.json")
        #expect(problems.isEmpty, "\(problems.prefix(5))")
        // And the check can fail: a date without milliseconds and a missing field are refused.
        var broken = try #require(events.first { $0.sequence != nil }).data
        broken["cause"] = nil
        #expect(try JSONSchemaCheck.validate([broken.serialized], against: "docs/entitlement-event.schema.json").count == 1)
    }

    @Test("docs/webhooks.yaml lists exactly the headers every delivery carries, as required")
    func webhooksContract() throws {
        let document = try #require(try YAMLFile.load("docs/webhooks.yaml").first as? [String: Any])
        let post = try #require(((document["webhooks"] as? [String: Any])?["entitlementEvent"] as? [String: Any])?["post"] as? [String: Any])
        let parameters = post["parameters"] as? [[String: Any]] ?? []
        let headers = parameters.filter { $0["in"] as? String == "header" && $0["required"] as? Bool == true }.compactMap { $0["name"] as? String }
        #expect(Set(headers) == Set(WebhookSender.headerNames), "\(headers) vs \(WebhookSender.headerNames)")
        #expect(document["openapi"] as? String == "3.1.0")
    }

    // MARK: - Dockerfile and dashboard

    @Test("Dockerfile builds every executable statically, runs as non-root, exposes the services' ports")
    func dockerfile() throws {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("deploy/Dockerfile"), encoding: .utf8)
        for executable in Self.processes.keys.sorted() {
            #expect(text.contains("--product \(executable)"), "the image builds \(executable)")
        }
        #expect(text.contains("--static-swift-stdlib") && text.contains("librdkafka1") && text.contains("USER 10001"))
        // librdkafka >= 2.2 in the runtime image: a base whose distribution packages it, and a build-time check.
        let runtimeBase = text.split(separator: "\n").last { $0.hasPrefix("FROM ") }.map(String.init) ?? ""
        let librdkafkaByBase = ["FROM ubuntu:24.04": "2.3.0", "FROM debian:trixie-slim": "2.8.0", "FROM debian:bookworm-slim": "2.0.2"]
        let shipped = try #require(librdkafkaByBase[runtimeBase], "unknown runtime base \(runtimeBase): add the librdkafka its distribution packages")
        #expect(shipped.compare("2.2.0", options: .numeric) != .orderedAscending, "\(runtimeBase) ships librdkafka \(shipped), below 2.2")
        #expect(text.contains("ARG LIBRDKAFKA_MINIMUM=2.2.0") && text.contains("dpkg --compare-versions"), "the image build checks the installed version")
        let exposed = text.split(separator: "\n").filter { $0.hasPrefix("EXPOSE") }.flatMap { $0.split(separator: " ").dropFirst().compactMap { Int($0) } }
        #expect(Set(exposed) == [
            Self.defaultIngestPort, Self.defaultWorkerPort, Self.defaultCustomerAPI.port, Self.defaultCustomerAPI.opsPort, Self.defaultWebhooksPort, Self.defaultConsole.port,
            Self.defaultConsole.opsPort,
        ])
    }

    @Test("the Grafana dashboard plots only metrics the services export")
    func dashboard() throws {
        // The names the services really emit: exercise every metric once and read the registry's output.
        let registry = PrometheusCollectorRegistry()
        let ingest = IngestMetrics(registry: registry)
        ingest.request(status: 200)
        let worker = WorkerMetrics(registry: registry)
        worker.records("applied", 1)
        worker.notificationType(label: "unknown")
        worker.unknownValue(field: "f")
        worker.deadLettered(code: "c")
        worker.retry(step: "s")
        worker.lag(partition: KafkaTopicPartition(topic: "t", partition: 0), records: 1)
        let events = EventsMetrics(registry: registry)
        events.oldestUnpublishedAge.record(Double(1))
        events.published.increment()
        events.relayFailures.increment()
        let webhooks = WebhooksMetrics(registry: registry)
        webhooks.attempt("delivered")
        webhooks.oldestUndelivered(endpoint: "we_0", seconds: 1)
        webhooks.attemptDuration.record(.milliseconds(5))
        let customerAPI = CustomerAPIMetrics(registry: registry)
        customerAPI.request(route: "getCustomer", status: 200)
        customerAPI.applyLatency.record(.milliseconds(5))
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        let exported = Set(String(decoding: buffer, as: UTF8.self).split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.map { String($0.split(separator: " ")[2]) })

        let data = try Data(contentsOf: repositoryRoot.appendingPathComponent("deploy/grafana/pipeline-dashboard.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let expressions = (dashboard["panels"] as? [[String: Any]] ?? []).flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
        #expect(expressions.count >= 10)
        let pattern = try Regex(#"\b(ingest|worker|events|webhooks|customer_api)_[a-z_]+"#)
        var plotted: Set<String> = []
        for expression in expressions {
            for match in expression.matches(of: pattern) {
                var name = String(expression[match.range])
                for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) && !exported.contains(name) { name.removeLast(suffix.count) }
                plotted.insert(name)
            }
        }
        #expect(plotted.subtracting(exported).isEmpty, "plotted but never exported: \(plotted.subtracting(exported).sorted())")
        // Every panel the issue names: ingest rate and latency, outcomes by reason, batch latency, lag, dead letters.
        for required in ["ingest_requests_total", "ingest_produce_duration_seconds", "worker_notifications_total", "worker_dead_letters_total",
                         "worker_batch_duration_seconds", "worker_consumer_lag_records", "events_outbox_oldest_age_seconds", "events_published_total",
                         "webhooks_attempts_total", "webhooks_oldest_undelivered_age_seconds", "customer_api_requests_total", "customer_api_purchase_apply_duration_seconds"] {
            #expect(plotted.contains(required), "the dashboard plots \(required)")
        }
    }

    @Test("the subscription-metrics dashboard calls only metric functions the migrations define, with their parameters; compose provisions both dashboards")
    func subscriptionMetricsDashboard() throws {
        let data = try Data(contentsOf: repositoryRoot.appendingPathComponent("deploy/grafana/subscription-metrics-dashboard.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let targets = (dashboard["panels"] as? [[String: Any]] ?? []).flatMap { $0["targets"] as? [[String: Any]] ?? [] }
        let sql = targets.compactMap { $0["rawSql"] as? String }
        #expect(sql.count == targets.count && sql.count >= 9, "every panel is a raw SQL query")
        let migrations = Migrations.all.flatMap(\.sql).joined(separator: "\n")
        let call = try Regex(#"\b(metric_[a-z_]+)\(([^()]*(?:\([^()]*\)[^()]*)*)\)"#)
        var called: Set<String> = []
        for query in sql {
            let matches = query.matches(of: call)
            #expect(!matches.isEmpty, "\(query) calls no metric function")
            for match in matches {
                let name = String(match.output[1].substring ?? "")
                called.insert(name)
                #expect(migrations.contains("CREATE FUNCTION \(name)("), "\(name) is not defined by a migration")
                let metric = try #require(SubscriptionMetric.allCases.first { $0.function == name }, "\(name) is not a SubscriptionMetric")
                // Top-level commas only (NULLIF('$bundle_id', '') is one argument).
                var depth = 0
                var arguments = 1
                for character in match.output[2].substring ?? "" {
                    if character == "(" { depth += 1 } else if character == ")" { depth -= 1 } else if character == "," && depth == 0 { arguments += 1 }
                }
                #expect(arguments == (metric.takesCurrency ? 8 : 7), "\(name) called with \(arguments) arguments")
                // Every column the panel reads is one the function returns.
                let selected = query.split(separator: "FROM")[0]
                let returned = Set(metric.columns)
                let read = selected.matches(of: try Regex(#"\b([a-z_]+) AS"#)).compactMap { $0.output[1].substring.map(String.init) }
                for column in read where column != "bucket_end" && column != "bucket_start" && !column.hasPrefix("to_char") {
                    #expect(returned.contains(column), "\(name) returns no column \(column)")
                }
            }
        }
        for required in ["metric_active_subscriptions", "metric_mrr", "metric_churn", "metric_trial_conversion", "metric_refunds"] {
            #expect(called.contains(required), "the dashboard shows \(required)")
        }
        let datasources = try #require(try YAMLFile.load("deploy/grafana/provisioning/datasources/datasources.yaml").first as? [String: Any])
        let uids = (datasources["datasources"] as? [[String: Any]] ?? []).compactMap { $0["uid"] as? String }
        #expect(Set(uids) == ["prometheus", "pipeline-postgres", "jaeger"])
        // The trace backend Grafana points at is compose's, on its query port; every process of ours exports to it.
        let jaegerURL = (datasources["datasources"] as? [[String: Any]] ?? []).first { $0["uid"] as? String == "jaeger" }?["url"] as? String
        let composeServices = try #require((try YAMLFile.load("docker-compose.yml").first as? [String: Any])?["services"] as? [String: [String: Any]])
        #expect(jaegerURL == "http://jaeger:16686" && composeServices["jaeger"] != nil)
        for (name, service) in composeServices where service["build"] != nil {
            let endpoint = (service["environment"] as? [String: Any])?["OTEL_EXPORTER_OTLP_ENDPOINT"] as? String
            #expect(endpoint?.contains("http://jaeger:4318") == true, "\(name) does not export traces to compose's Jaeger")
        }
        for target in targets {
            #expect((target["datasource"] as? [String: Any])?["uid"] as? String == "pipeline-postgres")
        }
        let compose = try #require(try YAMLFile.load("docker-compose.yml").first as? [String: Any])
        let grafana = try #require((compose["services"] as? [String: [String: Any]])?["grafana"])
        let volumes = grafana["volumes"] as? [String] ?? []
        #expect(volumes.contains("./deploy/grafana/provisioning:/etc/grafana/provisioning:ro"))
        #expect(volumes.contains("./deploy/grafana:/var/lib/grafana/dashboards:ro"), "both dashboard files are mounted where the provider loads them")
        let provider = try #require(try YAMLFile.load("deploy/grafana/provisioning/dashboards/dashboards.yaml").first as? [String: Any])
        let path = ((provider["providers"] as? [[String: Any]])?.first?["options"] as? [String: Any])?["path"] as? String
        #expect(path == "/var/lib/grafana/dashboards")
    }
}

/// YAML read by PyYAML from the project's venv (scripts/install.sh) and handed over as JSON: a real YAML parser,
/// without adding a Swift YAML dependency to the build graph for one test.
