import AppStoreNotifications
import AppStorePull
import AppStoreServerAPI
import AppStoreServerAPIModels
import ArgumentParser
import Foundation
import KafkaClient
import PipelineConfiguration
import SharedSettings

/// A verifier for what a command fetched from Apple: the app named on the command line (and its App Apple ID from
/// `APPS` when listed there), in `environment`, under `TRUSTED_ROOTS` (default: Apple's root).
func commandVerifier(bundleId: String, environment: Environment) throws -> SignedPayloadVerifier {
    let reader = EnvironmentReader()
    var settings = PipelineSettings(kafka: KafkaClientConfigurationValues(bootstrapServers: [], clientId: "pipelinectl"))
    let listed = (try? reader.optionalString("APPS").map(PipelineSettings.parseApps)) ?? nil
    let appAppleId = listed?.first(where: { $0.bundleId == bundleId })?.appAppleId
    settings.apps = [AppIdentity(bundleId: bundleId, appAppleId: appAppleId, environments: [environment])]
    settings.trustedRoots = reader.list("TRUSTED_ROOTS", default: ["apple"])
    return try SignedPayloadVerifier(configuration: try settings.verifierConfiguration())
}

/// `pipelinectl refunds`: Get Refund History, every page; the refunds go through the topic and the workers.
struct RefundsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "refunds",
        abstract: "A customer's refunded transactions (Get Refund History, every page), applied through the workers.",
        discussion: """
            Each refunded transaction is verified, printed, and produced to the notifications topic as a pulled
            transaction (record kind historyTransaction), then the subscription's status is pulled and produced as a
            status snapshot: the workers store the revocations and apply Apple's status, so a refund whose
            notification was missed heals the row. --no-apply only prints.
            """)

    @OptionGroup var appStore: AppStoreOptions
    @OptionGroup var connection: ConnectionOptions
    @Option(help: "Any transaction id of the customer (the original one is best).") var originalTransactionId: String
    @Flag(help: "Only print; produce nothing.") var noApply = false
    @Option(help: "How long to wait for the workers to apply them (e.g. 1m).") var wait = "1m"
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        let environment = try appStore.resolvedEnvironment()
        let verifier = try commandVerifier(bundleId: appStore.bundleId, environment: environment)
        let waitMilliseconds = try parseDuration(wait, option: "--wait")
        let (bundleId, id, apply) = (appStore.bundleId, originalTransactionId, !noApply)
        let (refunds, pages, summary) = try await withPullServices(appStore: appStore, connection: connection) { api, producer, store in
            var signed: [String] = []
            var revision: String?
            var pages = 0
            repeat {
                let page = try await api.refundHistory(bundleId: bundleId, transactionId: id, revision: revision)
                pages += 1
                signed += page.signedTransactions
                revision = page.hasMore ? page.revision : nil
            } while revision != nil
            var refunds: [(signed: String, transaction: JWSTransactionDecodedPayload)] = []
            for jws in signed {
                do {
                    refunds.append((jws, try await verifier.verifyTransaction(jws).model))
                } catch let error as VerificationError {
                    throw ToolFailure("Apple's refund history holds a transaction that does not verify (\(error.code)): \(error.reason)")
                }
            }
            guard apply, !refunds.isEmpty else { return (refunds, pages, PullSummary?.none) }
            try await producer.produce(refunds.map { (PulledRecordKind.historyTransaction, $0.transaction.originalTransactionId, Array($0.signed.utf8), "refunds") })
            let reconciler = StatusReconciler(api: api, producer: producer, store: store, logger: toolLogger)
            let originals = Array(Set(refunds.compactMap(\.transaction.originalTransactionId))).sorted()
            let summary = try await reconciler.run(
                bundleId: bundleId, environment: environment, ids: originals, argumentsKey: "refunds|\(bundleId)|\(runDigest(erasureKey: store.erasureKey, api: api).hex(originals.joined(separator: ",")))",
                restart: true, wait: .milliseconds(waitMilliseconds))
            return (refunds, pages, summary)
        }
        if json {
            printJSON(.object(JSONObject([
                "pages": jsonValue(pages),
                "refunds": .array(refunds.map { refund in
                    let t = refund.transaction
                    return .object(JSONObject([
                        "transactionId": jsonValue(t.transactionId), "originalTransactionId": jsonValue(t.originalTransactionId), "productId": jsonValue(t.productId),
                        "revocationDate": jsonValue(t.revocationDate), "revocationReason": jsonValue(t.rawRevocationReason), "revocationType": jsonValue(t.rawRevocationType),
                        "revocationPercentage": jsonValue(t.revocationPercentage),
                    ]))
                }),
                "applied": .bool(summary != nil), "rowsChanged": jsonValue(summary?.changes.count), "notApplied": jsonValue(summary?.notApplied),
            ])))
            return
        }
        print("\(refunds.count) refunded transaction(s) in \(pages) page(s)")
        for refund in refunds {
            let t = refund.transaction
            print("  \(t.transactionId ?? "-") (\(t.productId ?? "-")): revoked \(t.revocationDate?.description ?? "-"), reason \(t.rawRevocationReason.map(String.init) ?? "-"), \(t.rawRevocationType ?? "-")\(t.revocationPercentage.map { " \($0 / 1000)%" } ?? "")")
        }
        if let summary { printPullSummary(summary, command: "refunds", json: false) }
    }
}

/// `pipelinectl extend`: one subscription, or every active subscriber of a product; `extend status`.
struct ExtendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "extend", abstract: "Extend renewal dates as goodwill (one subscription, or all active subscribers of a product).",
        subcommands: [Request.self, Status.self], defaultSubcommand: Request.self)

    struct Request: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "request",
            abstract: "Extend one subscription (--original-transaction-id) or all active subscribers of a product (--all --product-id).",
            discussion: """
                Apple's rules are checked before calling: 1 to 90 days; a reason code 0 (undeclared), 1 (customer
                satisfaction), 2 (other) or 3 (service issue or outage); for one subscription, at most two extensions in
                365 days and not a free offer, billing retry or expired subscription, nor a family member's (the purchaser's
                is named when known). The request identifier is recorded before the call: running the same command again
                after a failure sends the same one, and Apple applies it once. Apple's RENEWAL_EXTENDED notifications
                then move each expiry through the workers.
                """)

        @OptionGroup var appStore: AppStoreOptions
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The subscription to extend.") var originalTransactionId: String?
        @Flag(help: "Every active subscriber of --product-id (Apple's mass extension).") var all = false
        @Option(help: "The product (with --all).") var productId: String?
        @Option(name: .customLong("storefront"), help: "Only these storefronts (ISO 3166-1 alpha-3, repeatable; with --all).") var storefronts: [String] = []
        @Option(help: "Days, 1 to 90.") var days: Int32
        @Option(help: "0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.") var reasonCode: Int32
        @Flag(help: "Print JSON.") var json = false

        func validate() throws {
            guard (originalTransactionId != nil) != all else { throw ValidationError("choose --original-transaction-id or --all") }
            if all, productId == nil { throw ValidationError("--all needs --product-id") }
            if !all, productId != nil || !storefronts.isEmpty { throw ValidationError("--product-id and --storefront go with --all") }
            guard ExtendReasonCode(rawValue: reasonCode) != nil else { throw ValidationError("--reason-code must be 0, 1, 2 or 3") }
            do {
                try RenewalExtensionRequest(extendByDays: days, extendReasonCode: .undeclared, requestIdentifier: "x", productId: productId, storefrontCountryCodes: storefronts).validate()
            } catch {
                throw ValidationError(error.rule)
            }
        }

        func run() async throws {
            let environment = try appStore.resolvedEnvironment()
            let (bundleId, otid, productId, storefronts, days, reason) = (appStore.bundleId, originalTransactionId, productId, storefronts, days, reasonCode)
            let answer: JSONObject = try await withPullServices(appStore: appStore, connection: connection) { api, _, store in
                if let otid {
                    guard let subject = try await store.extensionSubject(environment: environment.rawValue, bundleId: bundleId, originalTransactionId: otid) else {
                        throw ToolFailure("no subscription \(UntrustedText.quoted(otid, limit: 70)) in \(environment.rawValue) of \(bundleId) here: reconcile or import it first")
                    }
                    do {
                        try RenewalExtensionEligibility.check(
                            status: subject.status, offerType: subject.offerType, offerDiscountType: subject.offerDiscountType, ownershipType: subject.ownershipType,
                            purchaser: subject.purchaser, extensionsInLastYear: subject.extensionsInLastYear)
                    } catch let refusal as RenewalExtensionRefusal {
                        throw ToolFailure(refusal.description)
                    }
                }
                let requestIdentifier = try await store.openRenewalExtension(
                    bundleId: bundleId, environment: environment.rawValue, originalTransactionId: otid, productId: productId, storefronts: storefronts,
                    days: Int(days), reasonCode: Int(reason), fresh: UUID().uuidString.lowercased())
                let request = RenewalExtensionRequest(
                    extendByDays: days, extendReasonCode: ExtendReasonCode(rawValue: reason)!, requestIdentifier: requestIdentifier, productId: productId,
                    storefrontCountryCodes: storefronts)
                do {
                    if let otid {
                        let response = try await api.extendRenewalDate(bundleId: bundleId, originalTransactionId: otid, request: request)
                        try await store.finishRenewalExtension(
                            requestIdentifier: requestIdentifier, succeeded: response.success, effectiveDate: response.effectiveDate?.date, appleError: nil)
                        return JSONObject([
                            "requestIdentifier": .string(requestIdentifier), "originalTransactionId": .string(otid), "success": .bool(response.success),
                            "effectiveDate": jsonValue(response.effectiveDate), "webOrderLineItemId": jsonValue(response.webOrderLineItemId),
                        ])
                    }
                    let response = try await api.massExtendRenewalDate(bundleId: bundleId, request: request)
                    return JSONObject(["requestIdentifier": .string(response.requestIdentifier), "productId": jsonValue(productId), "accepted": .bool(true)])
                } catch let error as AppStoreServerAPIError where error.kind == .response && !error.isRetryable {
                    // Apple refused for good: recorded, so the next run asks with a new identifier.
                    try await store.finishRenewalExtension(requestIdentifier: requestIdentifier, succeeded: false, effectiveDate: nil, appleError: error.description)
                    throw ToolFailure("Apple refused the extension: \(error)")
                }
            }
            if json {
                printJSON(.object(answer))
            } else if let otid {
                print("extended \(otid): \(answer["success"] == .bool(true) ? "renews \(answer["effectiveDate"]?.stringValue ?? "-")" : "Apple did not extend it") (request \(answer["requestIdentifier"]?.stringValue ?? ""))")
            } else {
                print("mass extension of \(productId ?? "") accepted: request \(answer["requestIdentifier"]?.stringValue ?? "") (pipelinectl extend status --product-id \(productId ?? "") --request-id …)")
            }
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "status", abstract: "A mass extension's progress (Get Status of Subscription Renewal Date Extensions).")

        @OptionGroup var appStore: AppStoreOptions
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The product of the mass extension.") var productId: String
        @Option(help: "Its request identifier.") var requestId: String
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let (bundleId, productId, requestId) = (appStore.bundleId, productId, requestId)
            let (status, summaryReceived) = try await withPullServices(appStore: appStore, connection: connection) { api, _, store in
                let status = try await api.massExtensionStatus(bundleId: bundleId, productId: productId, requestIdentifier: requestId)
                let summaryReceived = try await store.extensionSummaryReceived(requestIdentifier: requestId)
                // Apple's SUMMARY notification, once received, has already completed the row: an answer can only agree.
                if !summaryReceived {
                    try await store.recordMassExtensionStatus(
                        requestIdentifier: requestId, complete: status.complete ?? false, completeDate: status.completeDate?.date, succeeded: status.succeededCount,
                        failed: status.failedCount)
                }
                return (status, summaryReceived)
            }
            if json {
                printJSON(.object(JSONObject([
                    "requestIdentifier": .string(requestId), "productId": .string(productId), "complete": .bool(status.complete ?? false),
                    "completeDate": jsonValue(status.completeDate), "succeededCount": jsonValue(status.succeededCount), "failedCount": jsonValue(status.failedCount),
                    "summaryNotificationReceived": .bool(summaryReceived),
                ])))
            } else {
                print("\(requestId) (\(productId)): \(status.complete == true ? "complete \(status.completeDate?.description ?? "")" : "in progress"), \(status.succeededCount ?? 0) extended, \(status.failedCount ?? 0) failed\(summaryReceived ? "; Apple's RENEWAL_EXTENSION SUMMARY received" : "")")
            }
        }
    }
}

/// `pipelinectl app-transaction`: Get App Transaction Info, verified.
struct AppTransactionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "app-transaction", abstract: "The customer's app transaction (Get App Transaction Info), verified like every JWS.")

    @OptionGroup var appStore: AppStoreOptions
    @Option(help: "Any transaction id of the customer.") var transactionId: String
    @Flag(help: "Print JSON (the verified payload).") var json = false

    func run() async throws {
        let environment = try appStore.resolvedEnvironment()
        let verifier = try commandVerifier(bundleId: appStore.bundleId, environment: environment)
        let api = try appStore.client { error, wait in FileHandle.standardError.write(Data("waiting \(wait) before retrying: \(error)\n".utf8)) }
        let signed: String
        do {
            signed = try await api.appTransactionInfo(bundleId: appStore.bundleId, transactionId: transactionId)
            await api.shutdown()
        } catch {
            await api.shutdown()
            throw error
        }
        let verified: VerifiedPayload<AppTransaction>
        do {
            verified = try await verifier.verifyAppTransaction(signed)
        } catch {
            throw ToolFailure("Apple's app transaction does not verify (\(error.code)): \(error.reason)")
        }
        if json {
            printJSON(.object(verified.json))
        } else {
            let model = verified.model
            print("app transaction \(model.appTransactionId ?? "-") (\(model.bundleId ?? "-"), \(model.rawReceiptType ?? "-")): originally purchased \(model.originalPurchaseDate?.description ?? "-"), version \(model.originalApplicationVersion ?? "-"), platform \(model.rawOriginalPlatform ?? "-")")
        }
    }
}
