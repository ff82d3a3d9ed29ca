import AppStoreNotifications
import AppStoreServerAPI
import AppStoreServerAPIModels
import Crypto
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing
import PipelineTestSupport

/// A fake App Store Server API on a free port and a client configured for it, with a key minted for the test.
@Suite("App Store Server API client: JWT, errors, retries, rate limits, configuration")
struct AppStoreServerAPITests {
    static let window = NotificationHistoryRequest(startDate: Int64(Date().timeIntervalSince1970 * 1000) - 3_600_000, endDate: Int64(Date().timeIntervalSince1970 * 1000) + 60_000)

    func minter() throws -> NotificationMinter {
        NotificationMinter(chain: try TestCertificateAuthority().issueChain())
    }

    @Test("the token carries exactly Apple's header and claims, and is reused until shortly before it expires")
    func tokenShape() throws {
        let key = P256.Signing.PrivateKey()
        let clock = Mutex(Date(timeIntervalSince1970: 1_790_000_000))
        let signer = AppStoreTokenSigner(keyId: "K1", issuerId: "I1", signingKey: key, now: { clock.withLock { $0 } })
        let token = signer.token(bundleId: "com.example.a")
        let parts = token.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let header = try StrictJSONParser().parseObject(try #require(Base64.decode(parts[0], alphabet: .url)))
        let claims = try StrictJSONParser().parseObject(try #require(Base64.decode(parts[1], alphabet: .url)))
        #expect(header == JSONObject(["alg": .string("ES256"), "kid": .string("K1"), "typ": .string("JWT")]))
        #expect(Set(claims.keys) == ["iss", "iat", "exp", "aud", "bid"])
        #expect(claims["iss"]?.stringValue == "I1" && claims["aud"]?.stringValue == "appstoreconnect-v1" && claims["bid"]?.stringValue == "com.example.a")
        let iat = try #require(claims["iat"]?.int64Value), exp = try #require(claims["exp"]?.int64Value)
        #expect(iat == 1_790_000_000 && exp - iat <= 3_600 && exp > iat)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Base64.decode(parts[2], alphabet: .url)))
        #expect(key.publicKey.isValidSignature(signature, for: Array((parts[0] + "." + parts[1]).utf8)))
        // Reused a while, per app; re-signed close to expiry.
        clock.withLock { $0 += 600 }
        #expect(signer.token(bundleId: "com.example.a") == token)
        #expect(signer.token(bundleId: "com.example.b") != token)
        clock.withLock { $0 += TimeInterval(exp - iat) - 600 - 60 }
        #expect(signer.token(bundleId: "com.example.a") != token, "a token with a minute left is not sent")
    }

    @Test("the fake accepts our token and refuses a wrong key, a wrong kid and an expired token with 401")
    func jwtRefusals() async throws {
        let apple = try await FakeAppleFixture(minter: try minter())
        defer { Task { await apple.fake.stop() } }
        let good = apple.client()
        _ = try await good.notificationHistory(bundleId: FakeAppleFixture.bundleId, request: Self.window, paginationToken: nil)
        await good.shutdown()

        for (name, client) in [("wrong key", apple.client(key: P256.Signing.PrivateKey())), ("wrong kid", apple.client(keyId: "OTHERKEY99"))] {
            let error = await #expect(throws: AppStoreServerAPIError.self, "\(name)") {
                _ = try await client.notificationHistory(bundleId: FakeAppleFixture.bundleId, request: Self.window, paginationToken: nil)
            }
            #expect(error?.httpStatus == 401 && error?.isRetryable == false, "\(name): \(String(describing: error))")
            #expect(error?.description.contains("APPSTORE_KEY_ID") == true, "a 401 is explained: \(String(describing: error))")
            await client.shutdown()
        }
        // Expired: a token issued two hours ago, sent as is.
        let expired = AppStoreTokenSigner(keyId: FakeAppleFixture.keyId, issuerId: FakeAppleFixture.issuerId, signingKey: apple.key, now: { Date() - 7_200 })
            .token(bundleId: FakeAppleFixture.bundleId)
        let response = try await HTTPTestConnection(port: apple.port).send(
            path: "/inApps/v1/notifications/history", headers: ["Authorization": "Bearer " + expired, "Content-Type": "application/json"],
            body: Array(Self.window.json.serialized.utf8))
        #expect(response.status == 401)
        let refusals = apple.fake.requests.compactMap(\.refusal)
        #expect(refusals == ["bad signature", "unknown kid", "expired"], "\(refusals)")
    }

    @Test("Apple's errors: code, name, retryable; Retry-After in milliseconds is honoured; a non-retryable error is not retried")
    func errorsAndRetries() async throws {
        let apple = try await FakeAppleFixture(minter: try minter())
        defer { Task { await apple.fake.stop() } }
        for index in 0..<45 { await apple.fake.send(apple.minter.signedNotification(.sample(seed: index))) }  // 3 pages
        apple.fake.setFault(.rateLimit(retryAfterMilliseconds: 1_500), onHistoryRequest: 1)
        apple.fake.setFault(.apiError(status: 500, errorCode: 5_000_001, errorMessage: "An unknown error occurred. Please try again."), onHistoryRequest: 2)
        apple.fake.setFault(.drop, onHistoryRequest: 3)
        let client = apple.client()
        let started = Date()
        let page = try await client.notificationHistory(bundleId: FakeAppleFixture.bundleId, request: Self.window, paginationToken: nil)
        let waited = Date().timeIntervalSince(started)
        #expect(page.notificationHistory.count == 20 && page.hasMore && page.paginationToken != nil)
        #expect(waited >= 1.5, "waited \(waited) s although Retry-After said 1.5 s")
        #expect(apple.fake.historyRequestCount == 4)

        apple.fake.setFault(.apiError(status: 400, errorCode: 4_000_006, errorMessage: "Invalid transaction id."), onHistoryRequest: 5)
        let error = await #expect(throws: AppStoreServerAPIError.self) {
            _ = try await client.notificationHistory(bundleId: FakeAppleFixture.bundleId, request: Self.window, paginationToken: page.paginationToken)
        }
        #expect(error?.errorCode == 4_000_006 && error?.errorName == "InvalidTransactionIdError" && error?.isRetryable == false)
        #expect(error?.description.contains("4000006") == true && error?.description.contains("Invalid transaction id.") == true)
        #expect(apple.fake.historyRequestCount == 5, "a non-retryable error is not retried")
        await client.shutdown()

        for code: Int64 in [4_040_002, 4_040_004, 4_040_006, 5_000_001, 4_290_000] {
            #expect(AppStoreServerAPIError(kind: .response, httpStatus: 404, errorCode: code, reason: "", endpoint: "").isRetryable, "\(code)")
        }
        for code: Int64 in [4_000_006, 4_040_001, 4_040_010, 5_000_000] {
            #expect(!AppStoreServerAPIError(kind: .response, httpStatus: 400, errorCode: code, reason: "", endpoint: "").isRetryable, "\(code)")
        }
        let at = Date().addingTimeInterval(3)
        let parsed = try #require(AppStoreServerAPIClient.parseRetryAfter(String(Int64(at.timeIntervalSince1970 * 1000))))
        #expect(abs(parsed.timeIntervalSince(at)) < 0.01, "Retry-After is a UNIX time in milliseconds")
        var policy = AppStoreServerAPIConfiguration.RetryPolicy()
        policy.initialBackoff = .milliseconds(100)
        for attempt in 1...10 {
            #expect(AppStoreServerAPIClient.backoff(attempt: attempt, policy: policy, retryAfter: at) >= .milliseconds(2_900))
            #expect(AppStoreServerAPIClient.backoff(attempt: attempt, policy: policy, retryAfter: nil) <= policy.maximumBackoff)
        }
    }

    @Test("a malformed page is an error that says what is wrong; unknown send-attempt results are kept raw")
    func malformedPages() async throws {
        let apple = try await FakeAppleFixture(minter: try minter())
        defer { Task { await apple.fake.stop() } }
        let client = apple.client()
        for (index, body) in ["<html>busy</html>", #"{"hasMore":false}"#, #"{"notificationHistory":[{"sendAttempts":[]}],"hasMore":false}"#, #"{"notificationHistory":[],"hasMore":true}"#].enumerated() {
            apple.fake.setFault(.malformedBody(body), onHistoryRequest: index + 1)
            let error = await #expect(throws: AppStoreServerAPIError.self, "\(body)") {
                _ = try await client.notificationHistory(bundleId: FakeAppleFixture.bundleId, request: Self.window, paginationToken: nil)
            }
            #expect(error?.kind == .malformedResponse && error?.isRetryable == false, "\(String(describing: error))")
        }
        apple.fake.addHistoryOnly(apple.minter.signedNotification(.sample(seed: 1)), attempts: [
            SendAttemptItem(attemptDate: Int64(Date().timeIntervalSince1970 * 1000) - 1_000, sendAttemptResult: .timedOut),
            SendAttemptItem(attemptDate: Int64(Date().timeIntervalSince1970 * 1000), sendAttemptResult: SendAttemptResult("CARRIER_PIGEON_LOST")),
        ])
        let page = try await client.notificationHistory(bundleId: FakeAppleFixture.bundleId, request: Self.window, paginationToken: nil)
        #expect(page.notificationHistory.first?.lastSendAttemptResult?.rawValue == "CARRIER_PIGEON_LOST")
        #expect(page.notificationHistory.first?.lastSendAttemptResult?.isKnown == false)
        await client.shutdown()
    }

    @Test("statuses, transaction history v2 (revision paging) and transaction info decode Apple's shapes; an unknown id is Apple's 4040010")
    func subscriptionEndpoints() async throws {
        let apple = try await FakeAppleFixture(minter: try minter())
        defer { Task { await apple.fake.stop() } }
        var events: [NotificationMinter.SubscriptionEvent] = []
        for step in 0..<23 {
            var event = NotificationMinter.SubscriptionEvent.sample(seed: 11, signedDate: 1_785_000_000_000 + Int64(step) * 1_000)
            event.transactionId = String(3_400_000_000_000_000 + step)
            events.append(event)
        }
        let history = events.map { apple.minter.chain.sign(apple.minter.transaction($0)) }
        let last = events.last!
        apple.fake.setSubscription(.init(
            originalTransactionId: last.originalTransactionId, subscriptionGroupIdentifier: "21000001", status: 1, signedTransactionInfo: history.last!,
            signedRenewalInfo: apple.minter.chain.sign(apple.minter.renewalInfo(last)), history: history))
        let client = apple.client()
        let statuses = try await client.subscriptionStatuses(bundleId: FakeAppleFixture.bundleId, transactionId: events[3].transactionId)
        #expect(statuses.snapshots.count == 1 && statuses.snapshots.first?.status == 1 && statuses.snapshots.first?.originalTransactionId == last.originalTransactionId)
        #expect(statuses.snapshots.first?.subscriptionGroupIdentifier == "21000001" && statuses.appAppleId == apple.minter.appAppleId)
        let first = try await client.transactionHistory(bundleId: FakeAppleFixture.bundleId, transactionId: last.originalTransactionId, revision: nil)
        #expect(first.signedTransactions == Array(history.prefix(20)) && first.hasMore)
        let second = try await client.transactionHistory(bundleId: FakeAppleFixture.bundleId, transactionId: last.originalTransactionId, revision: first.revision)
        #expect(second.signedTransactions == Array(history.suffix(3)) && !second.hasMore)
        #expect(try await client.transactionInfo(bundleId: FakeAppleFixture.bundleId, transactionId: events[7].transactionId) == history[7])
        let error = await #expect(throws: AppStoreServerAPIError.self) {
            _ = try await client.transactionInfo(bundleId: FakeAppleFixture.bundleId, transactionId: "999")
        }
        #expect(error?.errorCode == 4_040_010 && error?.errorName == "TransactionIdNotFoundError" && error?.isRetryable == false)
        await client.shutdown()
    }

    @Test("the rate limiter keeps a burst under the configured rate by itself")
    func rateLimiter() async throws {
        let limiter = RequestRateLimiter()
        let started = ContinuousClock.now
        for _ in 0..<25 { try await limiter.acquire("app|history", perSecond: 10) }
        // 10 go at once (one second's worth), the other 15 at 10/s.
        #expect(ContinuousClock.now - started >= .milliseconds(1_400))
        let other = ContinuousClock.now
        try await limiter.acquire("other|history", perSecond: 10)
        #expect(ContinuousClock.now - other < .milliseconds(500), "apps have buckets of their own")
    }

    @Test("configuration: every missing or bad setting is named, and no error quotes the key")
    func configurationErrors() throws {
        let directory = NSTemporaryDirectory() + "appstore-config-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let key = P256.Signing.PrivateKey()
        let good = directory + "/good.p8", garbage = directory + "/garbage.p8", p384 = directory + "/p384.p8"
        try key.pemRepresentation.write(toFile: good, atomically: true, encoding: .utf8)
        let secretLine = key.pemRepresentation.split(separator: "\n")[1]
        // A PEM frame around half a key (the label is spelled in parts: no key-shaped literal in the repository).
        let label = "PRIVATE" + " KEY"
        try ("-----BEGIN \(label)-----\n" + secretLine + "\n-----END \(label)-----\n").write(toFile: garbage, atomically: true, encoding: .utf8)
        try P384.Signing.PrivateKey().pemRepresentation.write(toFile: p384, atomically: true, encoding: .utf8)
        let base = ["APPSTORE_KEY_ID": "K", "APPSTORE_ISSUER_ID": "I", "APPSTORE_PRIVATE_KEY_FILE": good]

        let configuration = try AppStoreServerAPIConfiguration.fromEnvironment(base, environment: .sandbox)
        #expect(configuration.baseURL == "https://api.storekit-sandbox.apple.com")
        #expect(configuration.rateLimits.notificationHistoryPerSecond == 5 && configuration.rateLimits.testNotificationPerSecond == 0.1)
        #expect(try AppStoreServerAPIConfiguration.fromEnvironment(base, environment: .production).baseURL == "https://api.storekit.apple.com")
        #expect(!configuration.description.contains(String(secretLine)))
        // APPSTORE_API_RATE: one number for every class, or class=rate pairs over Apple's defaults.
        let everyClass = try AppStoreServerAPIConfiguration.fromEnvironment(base.merging(["APPSTORE_API_RATE": "30"]) { _, new in new }, environment: .production)
        #expect(AppStoreServerAPIClient.EndpointFamily.allCases.allSatisfy { everyClass.rateLimits.perSecond($0) == 30 })
        let pairs = try AppStoreServerAPIConfiguration.fromEnvironment(base.merging(["APPSTORE_API_RATE": "statuses=40, lookup=5"]) { _, new in new }, environment: .production)
        #expect(pairs.rateLimits.subscriptionStatusPerSecond == 40 && pairs.rateLimits.lookupPerSecond == 5 && pairs.rateLimits.transactionHistoryPerSecond == 50)
        for bad in ["0", "fast", "statuses=", "everything=5", "statuses=20000"] {
            #expect {
                _ = try AppStoreServerAPIConfiguration.fromEnvironment(base.merging(["APPSTORE_API_RATE": bad]) { _, new in new }, environment: .production)
            } throws: { ($0 as? AppStoreConfigurationError)?.variable == "APPSTORE_API_RATE" }
        }

        let cases: [([String: String?], String)] = [
            (["APPSTORE_KEY_ID": nil], "APPSTORE_KEY_ID"), (["APPSTORE_ISSUER_ID": ""], "APPSTORE_ISSUER_ID"), (["APPSTORE_PRIVATE_KEY_FILE": nil], "APPSTORE_PRIVATE_KEY_FILE"),
            (["APPSTORE_PRIVATE_KEY_FILE": directory + "/missing.p8"], "APPSTORE_PRIVATE_KEY_FILE"), (["APPSTORE_PRIVATE_KEY_FILE": garbage], "APPSTORE_PRIVATE_KEY_FILE"),
            (["APPSTORE_PRIVATE_KEY_FILE": p384], "APPSTORE_PRIVATE_KEY_FILE"), (["APPSTORE_API_BASE_URL": "ftp://x"], "APPSTORE_API_BASE_URL"),
            (["APPSTORE_RATE_LIMIT_HISTORY": "-3"], "APPSTORE_RATE_LIMIT_HISTORY"),
        ]
        for (change, variable) in cases {
            var variables = base
            for (name, value) in change { variables[name] = value }
            let error = #expect(throws: AppStoreConfigurationError.self, "\(change)") {
                _ = try AppStoreServerAPIConfiguration.fromEnvironment(variables, environment: .production)
            }
            #expect(error?.variable == variable, "\(String(describing: error))")
            #expect(error?.description.contains(String(secretLine)) == false && error?.description.contains("PRIVATE KEY") == false)
        }
        #expect(throws: AppStoreConfigurationError.self) { _ = try AppStoreServerAPIConfiguration.fromEnvironment(base, environment: .xcode) }
    }
}
