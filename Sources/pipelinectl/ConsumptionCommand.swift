import AppStoreNotifications
import AppStoreServerAPIModels
import ArgumentParser
import Foundation

/// `pipelinectl consumption pending|send`: Apple's CONSUMPTION_REQUEST asks for an answer within 12 hours.
struct ConsumptionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "consumption", abstract: "List and answer Apple's consumption requests (refund requests need an answer within 12 hours).",
        subcommands: [Pending.self, Send.self])

    struct Pending: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "pending", abstract: "Unanswered consumption requests, soonest deadline first.")
        @OptionGroup var connection: ConnectionOptions
        @Flag(help: "Answered ones too.") var all = false
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let all = all
            let requests = try await connection.configuration().withStore(logger: toolLogger) { store in try await store.consumptionRequests(all: all) }
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            if json {
                printJSON(.array(requests.map { request in
                    .object(JSONObject([
                        "transactionId": .string(request.transactionId), "bundleId": .string(request.bundleId), "environment": .string(request.environment),
                        "reason": jsonValue(request.reason), "productType": jsonValue(request.productType),
                        "requestedAt": jsonValue(Timestamp(millisecondsSince1970: request.requestedAt)), "deadline": jsonValue(Timestamp(millisecondsSince1970: request.deadline)),
                        "answeredAt": jsonValue(request.answeredAt.map(Timestamp.init(millisecondsSince1970:))),
                        "missed": .bool(request.answeredAt == nil && request.deadline < now),
                    ]))
                }))
                return
            }
            print("\(requests.count) consumption request(s)\(all ? "" : " pending")")
            for request in requests {
                let state = request.answeredAt != nil ? "answered" : request.deadline < now ? "MISSED (deadline passed)" : String(format: "due in %.1f h", Double(request.deadline - now) / 3_600_000)
                print("  \(request.transactionId)  \(request.bundleId) \(request.environment)  deadline \(Timestamp(millisecondsSince1970: request.deadline))  \(state)  \(request.reason ?? "")")
            }
        }
    }

    struct Send: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "send", abstract: "Send consumption information (v2) for a transaction, after checking Apple's rules locally.")
        @OptionGroup var appStore: AppStoreOptions
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The transaction the request is about.") var transactionId: String
        @Flag(help: "The customer consented to sharing this information (required by Apple).") var customerConsented = false
        @Option(help: "DELIVERED, UNDELIVERED_QUALITY_ISSUE, UNDELIVERED_WRONG_ITEM, UNDELIVERED_SERVER_OUTAGE or UNDELIVERED_OTHER.") var deliveryStatus: String
        @Option(help: "true or false: whether you provided a free sample or trial.") var sampleContentProvided: String
        @Option(help: "Milliunits consumed, 0…100000 (not for auto-renewable subscriptions).") var consumptionPercentage: Int64?
        @Option(help: "DECLINE, GRANT_FULL or GRANT_PRORATED.") var refundPreference: String?

        func run() async throws {
            guard let sample = Bool(sampleContentProvided.lowercased()) else { throw ValidationError("--sample-content-provided must be true or false") }
            let request = ConsumptionRequest(
                customerConsented: customerConsented, deliveryStatus: deliveryStatus, sampleContentProvided: sample, consumptionPercentage: consumptionPercentage,
                refundPreference: refundPreference)
            let transactionId = transactionId
            let operations = try connection.configuration()
            // The product type decides a rule: from the recorded request, else from the stored transaction.
            let productType = try await operations.withStore(logger: toolLogger) { store in
                try await store.consumptionRequests(all: true, transactionId: transactionId).first?.productType
            }
            do {
                try request.validate(productType: productType)
            } catch {
                throw ValidationError("refused before sending: \(error.rule)")
            }
            let api = try appStore.client()
            do {
                try await api.sendConsumptionInformation(bundleId: appStore.bundleId, transactionId: transactionId, request: request, productType: productType)
            } catch {
                await api.shutdown()
                throw error
            }
            await api.shutdown()
            try await operations.withStore(logger: toolLogger) { store in
                try await store.recordConsumptionAnswer(transactionId: transactionId, answer: request.json.serialized)
            }
            print("sent: Apple accepted the consumption information for \(transactionId)")
        }
    }
}
