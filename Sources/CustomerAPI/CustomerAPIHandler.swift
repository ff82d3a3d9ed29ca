import AppStoreNotifications
import AppStoreServerAPI
import EntitlementStore
import Foundation
import Logging
import NotificationRecords

/// The customer API's operations (the generated `APIProtocol` of docs/customer-api.yaml). Authentication, the
/// body limit and the error shape are middlewares; an operation returns its success answer or throws a
/// `CustomerAPIError`.
struct CustomerAPIHandler: APIProtocol {
    let configuration: CustomerAPIConfiguration
    let verifier: SignedPayloadVerifier
    let store: CustomerStore
    /// Where reads go (the primary, or a replica that replayed far enough: docs/scale.md); writes use `store`.
    let reads: ReadRouter
    let producer: PulledRecordProducer
    /// App Store Server API clients by environment, where a key is configured (Set App Account Token, Look Up Order ID).
    let appStore: [AppStoreNotifications.Environment: AppStoreServerAPIClient]
    let metrics: CustomerAPIMetrics
    let orders: OrderLookupCache
    let logger: Logger
    /// The first wait of a purchase looking whether a worker applied it; each wait doubles, up to `longestPoll`, so
    /// a purchase waiting 5 s reads its row about 30 times, not 500.
    var firstPoll: Duration = .milliseconds(5)
    var longestPoll: Duration = .milliseconds(250)

    // MARK: - Purchases

    func postPurchase(_ input: Operations.PostPurchase.Input) async throws -> Operations.PostPurchase.Output {
        let started = ContinuousClock.now
        let bundleId = input.path.bundleId
        guard case .json(let request) = input.body else { throw CustomerAPIError(400, "invalid_request", "send application/json") }
        guard let customerId = CustomerId.canonical(request.customerId) else {
            throw CustomerAPIError(400, "invalid_customer_id", "customerId must be a UUID (the app's user id as an appAccountToken)")
        }
        guard request.signedTransaction.split(separator: ".", omittingEmptySubsequences: false).count == 3 else {
            throw CustomerAPIError(
                400, "bare_transaction_id",
                "signedTransaction must be the transaction's jwsRepresentation (a signed JWS), not a transaction id: an id proves nothing")
        }
        let document = PurchaseRecordDocument(
            bundleId: bundleId, claim: PurchaseClaim(customerId: customerId, policy: configuration.ownershipPolicy(for: bundleId)),
            signedTransaction: request.signedTransaction, signedRenewalInfo: request.signedRenewalInfo)
        let verified: VerifiedNotification
        do {
            verified = try await verifier.verifyPurchase(document)
        } catch {
            // Online revocation checks without an answer: not the purchase's fault; the backend retries.
            if error.isTransient { throw CustomerAPIError(503, "unavailable", error.reason, headers: ["Retry-After": "5"]) }
            throw CustomerAPIError(422, error.code, error.reason)
        }
        let transaction = verified.transactionInfo!.model
        let transactionId = transaction.transactionId ?? ""
        let originalTransactionId = transaction.originalTransactionId ?? transactionId
        var record: CustomerPurchaseRecord
        do {
            record = try await store.recordPendingPurchase(CustomerPurchaseRecord(
                purchaseKey: document.purchaseKey, environment: verified.environment.rawValue, bundleId: bundleId, transactionId: transactionId,
                originalTransactionId: originalTransactionId, customerId: customerId, policy: document.claim.policy.rawValue, status: .pending))
        } catch {
            logger.warning("could not record a purchase: \(String(reflecting: error))")
            throw CustomerAPIError.unavailable
        }
        if record.status == .pending {
            // Produced again while pending: a first attempt whose record was lost is retried, and a record that did
            // land is a duplicate (its notificationUUID is the purchase key) that the worker skips.
            do {
                try await producer.produce([(kind: .purchase, key: originalTransactionId, value: Array(document.json.serialized.utf8), source: "customer-api")])
            } catch {
                logger.warning("could not produce a purchase: \(error)")
                throw CustomerAPIError(503, "not_stored", "the purchase could not be handed to the workers; retry (the same purchase is idempotent)", headers: ["Retry-After": "1"])
            }
            record = try await waitUntilApplied(key: document.purchaseKey, deadline: started + configuration.applyTimeout) ?? record
            if record.status != .pending { metrics.applyLatency.record(ContinuousClock.now - started) }
        }
        let answered = try await answer(record, ownershipType: transaction.inAppOwnershipType?.rawValue, mayWriteToApple: true, route: .primary)
        // After the worker's commit (or the pending claim's): the customer's, the transaction's and the claim's next
        // reads here see at least this state, with or without the token.
        let token = try await writeToken(remembering: [
            Self.stickyKey("c", bundleId, customerId), Self.stickyKey("t", bundleId, originalTransactionId), Self.stickyKey("t", bundleId, transactionId),
            Self.stickyKey("p", bundleId, record.purchaseKey),
        ])
        switch answered {
        case .applied(var result):
            result.consistencyToken = token.description
            return .ok(.init(headers: .init(consistencyToken: token.description), body: .json(result)))
        case .pending(var pending, let location):
            pending.consistencyToken = token.description
            return .accepted(.init(headers: .init(location: location, consistencyToken: token.description), body: .json(pending)))
        }
    }

    // MARK: - Read-your-writes

    /// The primary's position after a write this request made (see `ReadRouter.currentToken`), remembered for `keys`
    /// for `POSTGRES_READ_STICKY`. The write is done and idempotent: if the position cannot be read, 503 asks the
    /// caller to repeat it.
    func writeToken(remembering keys: [String]) async throws -> ConsistencyToken {
        let token: ConsistencyToken
        do {
            token = try await reads.currentToken()
        } catch {
            logger.warning("could not read the primary's WAL position: \(String(reflecting: error))")
            throw CustomerAPIError.unavailable
        }
        reads.remember(token, for: keys)
        return token
    }

    /// The token a read carries: the one sent (a malformed one is refused), or a newer one a write through this
    /// process remembered for `keys`.
    func readRoute(_ header: String?, keys: [String]) throws -> ReadRoute {
        var sent: ConsistencyToken?
        if let header {
            guard let token = ConsistencyToken(header) else {
                throw CustomerAPIError(400, "invalid_consistency_token", "Consistency-Token must be a token a write answered with (like 16/B374D848)")
            }
            sent = token
        }
        return .replica(after: reads.token(sent, orRememberedFor: keys))
    }

    /// A sticky key: a kind (`c` customer, `t` transaction, `p` purchase claim, `e` erasure), the app and the id.
    static func stickyKey(_ kind: String, _ bundleId: String, _ id: String) -> String { kind + "\u{1F}" + bundleId + "\u{1F}" + id }

    /// Where a read runs: on the primary (a write's own answer, read after its commit), or through the router.
    enum ReadRoute: Sendable {
        case primary
        case replica(after: ConsistencyToken?)
    }

    /// Runs `body` (reads only) where `route` says; any failure is 503 `unavailable` (a replica's failures never
    /// reach here: the router answers them from the primary).
    func read<T: Sendable>(_ route: ReadRoute, _ what: String, _ body: @escaping @Sendable (CustomerStore) async throws -> T) async throws -> T {
        do {
            switch route {
            case .primary: return try await body(store)
            case .replica(let token):
                let logger = logger
                return try await reads.read(after: token) { client in try await body(CustomerStore(client: client, logger: logger)) }
            }
        } catch {
            logger.warning("could not read \(what): \(String(reflecting: error))")
            throw CustomerAPIError.unavailable
        }
    }

    /// The 202's `Location`: one claim's outcome, whoever else claimed the same transaction.
    func getPurchaseClaim(_ input: Operations.GetPurchaseClaim.Input) async throws -> Operations.GetPurchaseClaim.Output {
        let route = try readRoute(input.headers.consistencyToken, keys: [Self.stickyKey("p", input.path.bundleId, input.path.claimId)])
        let claimId = input.path.claimId
        let record = try await read(route, "a purchase claim") { store in try await store.purchase(key: claimId) }
        guard let record, record.bundleId == input.path.bundleId else { throw CustomerAPIError.notFound("no such purchase claim for this app") }
        switch try await answer(record, ownershipType: nil, mayWriteToApple: false, route: route) {
        case .applied(let result): return .ok(.init(body: .json(result)))
        case .pending(let pending, let location): return .accepted(.init(headers: .init(location: location), body: .json(pending)))
        }
    }

    func getPurchase(_ input: Operations.GetPurchase.Input) async throws -> Operations.GetPurchase.Output {
        guard let customerId = CustomerId.canonical(input.query.customerId) else {
            throw CustomerAPIError(400, "invalid_customer_id", "customerId must be a UUID (the app's user id as an appAccountToken)")
        }
        let (bundleId, transactionId) = (input.path.bundleId, input.path.transactionId)
        let route = try readRoute(input.headers.consistencyToken, keys: [Self.stickyKey("c", bundleId, customerId), Self.stickyKey("t", bundleId, transactionId)])
        let record = try await read(route, "a purchase") { store in try await store.latestPurchase(bundleId: bundleId, transactionId: transactionId, customerId: customerId) }
        guard let record else { throw CustomerAPIError.notFound("this customer posted no purchase of this transaction for this app") }
        switch try await answer(record, ownershipType: nil, mayWriteToApple: false, route: route) {
        case .applied(let result): return .ok(.init(body: .json(result)))
        case .pending(let pending, let location): return .accepted(.init(headers: .init(location: location), body: .json(pending)))
        }
    }

    enum PurchaseAnswer {
        case applied(Components.Schemas.PurchaseResult)
        case pending(Components.Schemas.PurchasePending, location: String)
    }

    /// The answer to a claim as it now stands: pending (202, `Location` naming this claim), taken by another
    /// customer (409), or applied (200, with the claimant's entitlements read after the worker's commit). An
    /// accepted claim whose purchase has since moved to another customer answers 409: today's owner, never a
    /// cached first answer. Only a POST (`mayWriteToApple`) calls Set App Account Token; a read never writes to
    /// Apple (`AppleTokenRetrier` retries in the background).
    func answer(_ record: CustomerPurchaseRecord, ownershipType: String?, mayWriteToApple: Bool, route: ReadRoute) async throws -> PurchaseAnswer {
        switch record.status {
        case .pending:
            let location = "/v1/apps/\(Self.pathComponent(record.bundleId))/purchases/claims/\(Self.pathComponent(record.purchaseKey))"
            return .pending(.init(status: .pending, transactionId: record.transactionId, location: location), location: location)
        case .conflict:
            throw CustomerAPIError(409, "owned_by_another_customer", "this purchase is owned by another customer, and the app's ownership policy keeps it there")
        case .accepted:
            let owner = try await read(route, "a purchase's owner") { store in
                try await store.ownership(environment: record.environment, bundleId: record.bundleId, originalTransactionId: record.originalTransactionId)
            }
            if let owner, owner.customerId != record.customerId {
                throw CustomerAPIError(
                    409, "owned_by_another_customer",
                    "this purchase has moved to another customer since this claim was applied; post a freshly signed transaction to claim it again under the app's policy")
            }
            let decision = record.decision.flatMap(OwnershipDecision.init(rawValue:)) ?? .alreadyOwned
            if mayWriteToApple, decision == .bound || decision == .transferred { await tellAppleTheOwner(record, ownershipType: ownershipType) }
            let customer = try await readCustomer(bundleId: record.bundleId, customerId: record.customerId, environment: nil, route: route)
            let ownership: Components.Schemas.PurchaseOutcome.OwnershipPayload = switch decision {
            case .bound: .bound
            case .transferred: .transferred
            case .alreadyOwned, .conflict: .owned
            }
            return .applied(.init(
                purchase: .init(
                    transactionId: record.transactionId, originalTransactionId: record.originalTransactionId,
                    environment: Components.Schemas.Environment(rawValue: record.environment) ?? .production, customerId: record.customerId,
                    ownership: ownership),
                customer: customer))
        }
    }

    /// Reads the purchase's row until a worker applied it or the deadline passed (nil: the row is gone or
    /// unreadable), with a doubling wait between reads (bounded by `longestPoll` and the deadline).
    func waitUntilApplied(key: String, deadline: ContinuousClock.Instant) async throws -> CustomerPurchaseRecord? {
        var wait = firstPoll
        while true {
            let record = try? await store.purchase(key: key)
            if let record, record.status != .pending { return record }
            let now = ContinuousClock.now
            if now >= deadline || Task.isCancelled { return record }
            try? await Task.sleep(for: min(wait, deadline - now))
            wait = min(wait * 2, longestPoll)
        }
    }

    /// Set App Account Token for a purchase bound or moved to a customer, once per owner, where the app has an App
    /// Store Server API key: later renewals then carry the owner's UUID. Family-shared transactions are never sent
    /// (Apple refuses them); Apple's family refusal (4000185) is recorded, not an error; any other failure is
    /// recorded and tried again at the next answer.
    func tellAppleTheOwner(_ record: CustomerPurchaseRecord, ownershipType: String?) async {
        guard let environment = AppStoreNotifications.Environment(rawValue: record.environment) else { return }
        do {
            guard let ownership = try await store.ownership(environment: record.environment, bundleId: record.bundleId, originalTransactionId: record.originalTransactionId),
                ownership.customerId == record.customerId, ownership.appleTokenStatus == nil || ownership.appleTokenStatus?.hasPrefix("failed") == true
            else { return }
            let status: String
            if ownershipType == "FAMILY_SHARED" || ownership.ownershipType == "FAMILY_SHARED" {
                status = "family-shared"
            } else if let api = appStore[environment] {
                do {
                    try await api.setAppAccountToken(bundleId: record.bundleId, originalTransactionId: record.originalTransactionId, appAccountToken: record.customerId)
                    status = "set"
                } catch let error as AppStoreServerAPIError where error.errorCode == AppleErrorCode.familyTransactionNotSupported {
                    status = "family-refused"
                } catch let error as AppStoreServerAPIError {
                    status = "failed:\(error.errorCode.map(String.init) ?? "\(error.kind)")"
                    logger.warning("Set App Account Token failed: \(error)")
                }
            } else {
                status = "not-configured"
            }
            metrics.appleTokenCalls(status.hasPrefix("failed") ? "failed" : status)
            try await store.recordAppleTokenStatus(environment: record.environment, bundleId: record.bundleId, originalTransactionId: record.originalTransactionId, status: status)
        } catch {
            logger.warning("could not record Set App Account Token's outcome: \(String(reflecting: error))")
        }
    }

    // MARK: - Reads

    func getCustomer(_ input: Operations.GetCustomer.Input) async throws -> Operations.GetCustomer.Output {
        guard let customerId = CustomerId.canonical(input.path.customerId) else {
            throw CustomerAPIError(400, "invalid_customer_id", "customerId must be a UUID (the app's user id as an appAccountToken)")
        }
        let route = try readRoute(input.headers.consistencyToken, keys: [Self.stickyKey("c", input.path.bundleId, customerId)])
        return .ok(.init(body: .json(try await readCustomer(bundleId: input.path.bundleId, customerId: customerId, environment: input.query.environment?.rawValue, route: route))))
    }

    func readCustomer(bundleId: String, customerId: String, environment: String?, route: ReadRoute) async throws -> Components.Schemas.Customer {
        let rows = try await read(route, "a customer") { store in
            try await store.customer(bundleId: bundleId, customerId: customerId, environment: environment)
        }
        let (subscriptionRows, purchaseRows) = (rows.subscriptions, rows.oneTimePurchases)
        // A customer's view names only that customer: where Apple's appAccountToken is still a previous owner's
        // (a purchase transferred here, Apple not told yet), it is left out.
        let subscriptions = subscriptionRows.map { row in
            var subscription = Self.subscription(row)
            if let token = subscription.appAccountToken, token.lowercased() != customerId { subscription.appAccountToken = nil }
            return subscription
        }
        let purchases = purchaseRows.map(Self.oneTimePurchase)
        return .init(
            customerId: customerId, bundleId: bundleId, hasActiveAccess: subscriptions.contains(where: \.isActive) || purchases.contains(where: \.isActive),
            subscriptions: subscriptions, oneTimePurchases: purchases)
    }

    // MARK: - Erasure

    func eraseCustomer(_ input: Operations.EraseCustomer.Input) async throws -> Operations.EraseCustomer.Output {
        guard let customerId = CustomerId.canonical(input.path.customerId) else {
            throw CustomerAPIError(400, "invalid_customer_id", "customerId must be a UUID (the app's user id as an appAccountToken)")
        }
        let requestId = input.query.requestId ?? ErasureRequest.newRequestId()
        guard ErasureRequest.isValidRequestId(requestId) else {
            throw CustomerAPIError(400, "invalid_request_id", "requestId must be 1 to 64 letters, digits or ._:-")
        }
        let reason = input.query.reason ?? "customer API request"
        guard reason.utf8.count <= 200 else { throw CustomerAPIError(400, "invalid_request", "reason must be at most 200 bytes") }
        guard let key = configuration.shared.erasureKey else {
            throw CustomerAPIError(503, "erasure_not_configured", "this service has no erasure key (ERASURE_KEY_FILE); ask the operator")
        }
        let request = ErasureRequest(
            requestId: requestId, subject: ErasureSubject(.customerId, customerId, bundleId: input.path.bundleId), reason: reason,
            requestedBy: "customer-api:" + (AuthenticatedKey.id ?? "unknown"))
        let report: ErasureReport
        do {
            report = try await ErasureStore(client: store.client, logger: logger).erase(request, key: key)
        } catch ErasureFailure.requestIdTaken(let id) {
            throw CustomerAPIError(409, "request_id_taken", ErasureFailure.requestIdTaken(id).description)
        } catch let failure as ErasureFailure {
            // Another key than the workers' (or none where one is needed): the operator's to fix; nothing was erased.
            logger.error("an erasure was refused: \(failure)")
            throw CustomerAPIError(503, "erasure_key_mismatch", "this service's erasure key is not the one in force; ask the operator (nothing was erased)")
        } catch {
            logger.warning("an erasure failed: \(UntrustedText.escaped(String(reflecting: error), limit: 400))")
            throw CustomerAPIError.unavailable
        }
        let location = "/v1/apps/\(Self.pathComponent(input.path.bundleId))/erasures/\(Self.pathComponent(report.requestId))"
        let token = try await writeToken(remembering: [Self.stickyKey("c", input.path.bundleId, customerId), Self.stickyKey("e", input.path.bundleId, report.requestId)])
        var erasure = Self.erasure(report)
        erasure.consistencyToken = token.description
        return .accepted(.init(headers: .init(location: location, consistencyToken: token.description), body: .json(erasure)))
    }

    func getErasure(_ input: Operations.GetErasure.Input) async throws -> Operations.GetErasure.Output {
        let (requestId, bundleId) = (input.path.requestId, input.path.bundleId)
        let route = try readRoute(input.headers.consistencyToken, keys: [Self.stickyKey("e", bundleId, requestId)])
        let report = try await read(route, "an erasure") { store in
            try await ErasureStore(client: store.client, logger: store.logger).report(requestId: requestId, bundleId: bundleId)
        }
        guard let report else { throw CustomerAPIError.notFound("no erasure with this request id for this app") }
        return .ok(.init(body: .json(Self.erasure(report))))
    }

    static func erasure(_ report: ErasureReport) -> Components.Schemas.Erasure {
        .init(
            requestId: report.requestId, bundleId: report.bundleId, status: report.status == "pending" ? .pending : .completed,
            requestedAt: report.requestedAt, completedAt: report.completedAt, counts: .init(additionalProperties: report.counts))
    }

    func getSubscription(_ input: Operations.GetSubscription.Input) async throws -> Operations.GetSubscription.Output {
        let (bundleId, originalTransactionId, environment) = (input.path.bundleId, input.path.originalTransactionId, input.query.environment?.rawValue)
        let route = try readRoute(input.headers.consistencyToken, keys: [Self.stickyKey("t", bundleId, originalTransactionId)])
        let rows = try await read(route, "a subscription") { store in
            try await store.subscriptions(bundleId: bundleId, originalTransactionId: originalTransactionId, environment: environment)
        }
        guard !rows.isEmpty else { throw CustomerAPIError.notFound("no subscription with this originalTransactionId in this app") }
        return .ok(.init(body: .json(.init(subscriptions: rows.map(Self.subscription)))))
    }

    func getTransaction(_ input: Operations.GetTransaction.Input) async throws -> Operations.GetTransaction.Output {
        let (bundleId, transactionId, environment) = (input.path.bundleId, input.path.transactionId, input.query.environment?.rawValue)
        let route = try readRoute(input.headers.consistencyToken, keys: [Self.stickyKey("t", bundleId, transactionId)])
        let rows = try await read(route, "a transaction") { store in
            try await store.transactions(bundleId: bundleId, transactionIds: [transactionId], environment: environment)
        }
        guard let row = rows.first else { throw CustomerAPIError.notFound("no transaction with this id in this app") }
        return .ok(.init(body: .json(Self.transaction(row))))
    }

    /// Apple's Look Up Order ID where it exists (Production, with a key), verified like any signed transaction and
    /// answered from our rows (or from Apple's own words where we hold no row); otherwise our rows only.
    func getOrder(_ input: Operations.GetOrder.Input) async throws -> Operations.GetOrder.Output {
        let bundleId = input.path.bundleId, orderId = input.path.orderId
        let environment = input.query.environment?.rawValue
        let route = try readRoute(input.headers.consistencyToken, keys: [])
        var answered: [Components.Schemas.Transaction] = []
        if environment != "Sandbox", let api = appStore[.production] {
            let signed: [String]
            do {
                signed = try await orders.signedTransactions(bundleId: bundleId, orderId: orderId) { try await api.lookUpOrder(bundleId: bundleId, orderId: orderId) }
            } catch let error as AppStoreServerAPIError {
                let wait = error.retryAfter.map { max(1, Int($0.timeIntervalSinceNow.rounded(.up))) } ?? 5
                throw CustomerAPIError(
                    503, "apple_unavailable", "Look Up Order ID failed: \(error.errorCode.map { "Apple error \($0)" } ?? "\(error.kind)")",
                    headers: ["Retry-After": String(wait)])
            }
            var verified: [JWSTransactionDecodedPayload] = []
            for jws in signed {
                guard let transaction = try? await verifier.verifyTransaction(jws), transaction.model.bundleId == bundleId else { continue }
                verified.append(transaction.model)
            }
            let ids = verified.compactMap(\.transactionId)
            let rows = (try? await read(route, "an order's transactions") { store in try await store.transactions(bundleId: bundleId, transactionIds: ids, environment: nil) }) ?? []
            for model in verified {
                if let row = rows.first(where: { $0.transactionId == model.transactionId }) {
                    answered.append(Self.transaction(row))
                } else if let id = model.transactionId {
                    answered.append(.init(
                        transactionId: id, originalTransactionId: model.originalTransactionId ?? id, environment: .production, productId: model.productId,
                        _type: model.type?.rawValue, purchaseDate: model.purchaseDate.map(\.date), expiresDate: model.expiresDate.map(\.date),
                        revocationDate: model.revocationDate.map(\.date), ownershipType: model.inAppOwnershipType?.rawValue,
                        appAccountToken: model.appAccountToken))
                }
            }
        }
        if answered.isEmpty {
            answered = try await read(route, "an order") { store in
                try await store.transactionsOfOrder(bundleId: bundleId, orderId: orderId, environment: environment)
            }.map(Self.transaction)
        }
        guard !answered.isEmpty else { throw CustomerAPIError.notFound("no transaction of this order id in this app") }
        return .ok(.init(body: .json(.init(orderId: orderId, transactions: answered))))
    }

    // MARK: - Shapes

    static func environment(_ text: String) -> Components.Schemas.Environment {
        Components.Schemas.Environment(rawValue: text) ?? .production
    }

    static func subscription(_ row: CustomerSubscriptionRow) -> Components.Schemas.Subscription {
        .init(
            originalTransactionId: row.originalTransactionId, environment: environment(row.environment), productId: row.productId,
            subscriptionGroupIdentifier: row.subscriptionGroupId, status: row.status, isActive: row.isActive, expiresAt: row.expiresAt,
            autoRenewStatus: row.autoRenewStatus, autoRenewProductId: row.autoRenewProductId, gracePeriodExpiresAt: row.gracePeriodExpiresAt,
            billingIssueSince: row.billingIssueSince, revocationDate: row.revocationDate, ownershipType: row.ownershipType, customerId: row.customerId,
            appAccountToken: row.appAccountToken, appTransactionId: row.appTransactionId, sequence: row.sequence, contradiction: row.contradiction,
            lastNotificationType: row.lastNotificationType, lastSignedDate: row.lastSignedDate)
    }

    static func oneTimePurchase(_ row: CustomerTransactionRow) -> Components.Schemas.OneTimePurchase {
        .init(
            transactionId: row.transactionId, originalTransactionId: row.originalTransactionId, environment: environment(row.environment), productId: row.productId,
            _type: row.type, purchaseDate: row.purchaseDate, expiresDate: row.expiresDate, revocationDate: row.revocationDate, ownershipType: row.ownershipType,
            customerId: row.customerId, isActive: row.isActive)
    }

    static func transaction(_ row: CustomerTransactionRow) -> Components.Schemas.Transaction {
        .init(
            transactionId: row.transactionId, originalTransactionId: row.originalTransactionId, environment: environment(row.environment), productId: row.productId,
            _type: row.type, purchaseDate: row.purchaseDate, expiresDate: row.expiresDate, revocationDate: row.revocationDate,
            revocationReason: row.revocationReason, ownershipType: row.ownershipType, appAccountToken: row.appAccountToken, customerId: row.customerId,
            signedDate: row.signedDate)
    }

    /// A path segment percent-encoded (ids are digits and bundle ids dotted names, but nothing is assumed).
    static func pathComponent(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? text
    }
}
