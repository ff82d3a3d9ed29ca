import AppStoreNotifications
import AppStorePull
import AppStoreServerAPI
import EntitlementStore
import Foundation
import Hummingbird
import KafkaClient
import Logging
import NotificationRecords

extension ConsolePages {
    // MARK: - Actions

    /// Re-drives the selected dead letters: each stored payload is produced again to the notifications topic,
    /// keyed by the subscription it claims, with the re-drive headers of `pipelinectl dlq redrive`; the workers
    /// verify it again (a forged one is dead-lettered again, with its reason).
    func redrive(_ request: Request, _ session: OperatorSession) async throws -> Response {
        let (body, reason) = try await actionForm(request, session, action: "redrive")
        let positions = body.all("position")
        guard !positions.isEmpty, positions.count <= 200 else {
            throw Refusal(status: .badRequest, code: "nothingSelected", reason: "Select between 1 and 200 dead letters to re-drive.")
        }
        let letters = try await store.deadLetterPayloads(positions)
        // One audit entry per subscription the letters claim (so each timeline shows it), one for the unclaimed.
        for (claimed, group) in Dictionary(grouping: letters, by: { [$0.bundleId ?? "", $0.key ?? ""] }).sorted(by: { $0.key.joined() < $1.key.joined() }) {
            try await store.audit(
                operatorEmail: session.email, action: "redrive", reason: reason, bundleId: claimed[0].isEmpty ? nil : claimed[0],
                originalTransactionId: claimed[1].isEmpty ? nil : claimed[1], detail: JSONObject(["positions": .array(group.map { .string($0.position) })]))
        }
        let outcome = try await actions.redrive(letters)
        metrics.action("redrive", outcome: "ok")
        logger.info("console re-drive", metadata: ["operator": "\(session.email)", "records": "\(outcome.redriven)", "held_back": "\(outcome.erasedHeldBack)"])
        let held = outcome.erasedHeldBack > 0 ? " \(outcome.erasedHeldBack) about erased customers held back." : ""
        return try await afterWrite { try await deadLettersPage(request, session, acted: "Re-drove \(outcome.redriven) dead letter(s) to \(actions.topic).\(held)") }
    }

    func subscriptionAction(_ request: Request, bundle: String, id: String, _ session: OperatorSession) async throws -> Response {
        let (body, reason) = try await actionForm(request, session, action: "subscription")
        switch body["action"] {
        case "reconcile":
            guard actions.canReconcile else {
                metrics.action("reconcile", outcome: "unavailable")
                throw Refusal(status: .serviceUnavailable, code: "appStoreNotConfigured", reason: "Reconcile needs the App Store Server API key (APPSTORE_*) in the console's environment.")
            }
            try await store.audit(operatorEmail: session.email, action: "reconcile", reason: reason, bundleId: bundle, originalTransactionId: id)
            let snapshots: Int
            do {
                snapshots = try await actions.reconcile(bundleId: bundle, originalTransactionId: id)
            } catch let failure as ConsoleActions.AppleFailure {
                metrics.action("reconcile", outcome: "apple_error")
                throw Refusal(status: .badGateway, code: "appleError", reason: failure.description)
            }
            metrics.action("reconcile", outcome: "ok")
            return try await afterWrite { try await subscriptionPage(request, bundle: bundle, id: id, session, acted: "Asked Apple: \(snapshots) status snapshot(s) sent to the workers.") }
        case "resend-webhooks":
            guard let endpoint = body["endpoint"], !endpoint.isEmpty else {
                throw Refusal(status: .badRequest, code: "endpointRequired", reason: "Choose the webhook endpoint to send the events to again.")
            }
            try await store.audit(
                operatorEmail: session.email, action: "resend-webhooks", reason: reason, bundleId: bundle, originalTransactionId: id,
                detail: JSONObject(["endpoint": .string(endpoint)]))
            let count = try await store.resendWebhooks(endpointId: endpoint, bundleId: bundle, originalTransactionId: id)
            metrics.action("resend-webhooks", outcome: "ok")
            return try await afterWrite { try await subscriptionPage(request, bundle: bundle, id: id, session, acted: "\(count) event(s) of this subscription go to \(endpoint) again, oldest first.") }
        default:
            throw Refusal(status: .badRequest, code: "unknownAction", reason: "This form names no action the console knows.")
        }
    }
}

extension ConsolePages {
    /// Erases a customer (admin only, the customer id typed again to confirm): the same erasure as `pipelinectl
    /// customers erase` and the customer API's DELETE. The audit entry names the request id, never the customer.
    func erase(_ request: Request, bundle: String, customerId: String, _ session: OperatorSession) async throws -> Response {
        let (body, reason) = try await actionForm(request, session, action: "erase")
        guard session.role == .admin else {
            metrics.action("erase", outcome: "forbidden")
            throw Refusal(status: .forbidden, code: "forbiddenRole", reason: "Only an admin operator may erase a customer.")
        }
        guard let key = actions.erasureKey else {
            metrics.action("erase", outcome: "unavailable")
            throw Refusal(status: .serviceUnavailable, code: "erasureNotConfigured", reason: "Erasure needs the erasure key (ERASURE_KEY_FILE) in the console's environment.")
        }
        guard (body["confirm"] ?? "").trimmingCharacters(in: .whitespaces).lowercased() == customerId.lowercased() else {
            throw Refusal(status: .badRequest, code: "confirmationMismatch", reason: "Type the customer id exactly to confirm the erasure.")
        }
        guard reason.utf8.count <= 200 else { throw Refusal(status: .badRequest, code: "reasonTooLong", reason: "The reason is at most 200 bytes.") }
        let report: ErasureReport
        do {
            report = try await ErasureStore(client: actions.entitlements.client, logger: logger).erase(
                ErasureRequest(subject: ErasureSubject(.customerId, customerId, bundleId: bundle), reason: reason, requestedBy: "console:" + session.email),
                key: key, emitsEvents: actions.entitlements.emitsEvents)
        } catch let failure as ErasureFailure {
            metrics.action("erase", outcome: "unavailable")
            throw Refusal(status: .serviceUnavailable, code: "erasureKeyMismatch", reason: "Nothing was erased: \(failure.description)")
        }
        try await store.audit(
            operatorEmail: session.email, action: "erase", reason: reason, bundleId: bundle, originalTransactionId: nil,
            detail: JSONObject(["requestId": .string(report.requestId), "subscriptions": .number(JSONNumber(Int64(report.subscriptions)))]))
        metrics.action("erase", outcome: "ok")
        logger.notice("console erasure", metadata: ["operator": "\(session.email)", "request_id": "\(report.requestId)"])
        let counts = report.counts.filter { $0.value > 0 }.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        return try await afterWrite { html("Erased", "erased", ["requestId": report.requestId, "bundle": bundle, "counts": counts.isEmpty ? "nothing was stored" : counts], session) }
    }
}

/// What the console's actions write besides the audit: records on the notifications topic, which the workers verify
/// and apply like every other record.
struct ConsoleActions: Sendable {
    let producer: KafkaProducer
    let topic: String
    /// The dead-letter topic, whose positions the re-drive log is keyed by.
    let deadLetterTopic: String
    let appStore: [AppStoreNotifications.Environment: AppStoreServerAPIClient]
    let entitlements: EntitlementStore
    /// `ERASURE_KEY_FILE`: without it the erase action is not offered.
    var erasureKey: ErasureKey? { entitlements.erasureKey }
    let logger: Logger

    var canReconcile: Bool { !appStore.isEmpty }

    /// Each stored dead letter re-driven exactly as `pipelinectl dlq redrive` re-drives the topic's record
    /// (`RedriveRecord`: ingest's headers, the record kind and the trace context kept, the re-drive count carried on)
    /// and written to the same re-drive log, so neither re-drives it again. Dead letters recorded before migration 20
    /// have no stored headers: they are re-driven with the re-drive headers and their `traceparent` only. Those about
    /// an erased customer are held back. Each send waits for the broker's acknowledgement.
    func redrive(_ letters: [StoredDeadLetter]) async throws -> (redriven: Int, erasedHeldBack: Int) {
        let now = NotificationRecord.now()
        let held = try await entitlements.erased(letters.map(\.erasureClaim))
        let redriven = try await entitlements.redrivenDeadLetters(topic: deadLetterTopic)
        var count = 0
        for (index, letter) in letters.enumerated() where !held.contains(index) {
            if let from = letter.deadLetterPosition, redriven.contains(from) { continue }
            let record = NotificationRecord.redriven(
                payload: letter.payload, key: letter.key, storedHeaders: letter.deadLetterHeaders, traceparent: letter.traceparent,
                from: letter.deadLetterPosition?.description ?? letter.position, to: topic, now: now)
            let report = try await producer.sendAndAwait(record)
            if let from = letter.deadLetterPosition {
                try await entitlements.recordRedrive(
                    from: from, errorCode: letter.errorCode, to: RecordPosition(topic: report.topic, partition: report.partition, offset: report.offset))
            }
            count += 1
        }
        return (count, held.count)
    }

    /// Apple's refusal of a reconcile, with the environment and Apple's code.
    struct AppleFailure: Error, CustomStringConvertible {
        var description: String
    }

    /// Get All Subscription Statuses for the subscription in each configured environment; the snapshots go to the
    /// topic like `pipelinectl reconcile`'s. Returns how many were sent.
    func reconcile(bundleId: String, originalTransactionId: String) async throws -> Int {
        var snapshots = 0
        for (environment, api) in appStore.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            let reconciler = StatusReconciler(api: api, producer: PulledRecordProducer(producer: producer, topic: topic, erasures: entitlements), store: entitlements, logger: logger)
            var summary = PullSummary()
            var before: [String: EntitlementSummary?] = [:]
            var produced: [String: String] = [:]
            do {
                try await reconciler.reconcile(originalTransactionId, bundleId: bundleId, environment: environment, summary: &summary, before: &before, produced: &produced)
            } catch let error as AppStoreServerAPIError {
                throw AppleFailure(description: "Apple answered (\(environment.rawValue)): \(UntrustedText.escaped(error.description, limit: 300))")
            }
            snapshots += summary.snapshots
        }
        return snapshots
    }
}
