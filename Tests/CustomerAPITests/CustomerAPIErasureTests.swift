import Foundation
import PipelineTestSupport
import Testing
import TestSupport
import TestGates

@Suite("Customer API: erasure (DELETE a customer) through customer-api, worker, broker and PostgreSQL", .serialized, .requiresKafkaAndPostgres)
struct CustomerAPIErasureTests: ProcessSuite {
    @Test("DELETE needs the erase scope; 202 with the erasure readable at its Location; A's purchases gone and kept gone through a replay; B untouched; no key configured is a 503")
    func eraseThroughTheAPI() async throws {
        let keyFile = try mintedErasureKeyFile()
        defer { removeMintedFile(keyFile) }
        let erasureKey = ["ERASURE_KEY_FILE": keyFile]
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL, workerEnvironment: erasureKey)
        try await scene.startAPI(extra: erasureKey)
        let write = try await scene.key().secret
        let read = try await scene.key(scope: "read").secret
        let erase = try await scene.key(scope: "erase").secret
        let (a, b) = (UUID().uuidString.lowercased(), UUID().uuidString.lowercased())
        let aEvent = currentPeriod(seed: 71, token: a)
        let bEvent = currentPeriod(seed: 72, token: b)
        #expect(try await scene.purchase(aEvent, customer: a, key: write).status == 200, "\(scene.fixture.logTail())")
        #expect(try await scene.purchase(bEvent, customer: b, key: write).status == 200)
        let bBefore = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/customers/\(b)", key: read)
        #expect(bBefore.json["subscriptions"]?.arrayValue?.count == 1)

        let path = "/v1/apps/\(scene.bundleId)/customers/\(a)?requestId=privacy-7&reason=ticket%207"
        let refused = try await scene.request("DELETE", path, key: write)
        #expect(refused.status == 403 && refused.json["error"]?.objectValue?["code"] == .string("insufficient_scope"), "write does not imply erase")
        let erased = try await scene.request("DELETE", path, key: erase)
        #expect(erased.status == 202, "\(erased.json.serialized) \(scene.fixture.logTail())")
        #expect(erased.headers["location"] == "/v1/apps/\(scene.bundleId)/erasures/privacy-7", "\(erased.headers)")
        #expect(erased.json["requestId"] == .string("privacy-7") && erased.json["status"] == .string("completed"))
        #expect(erased.json["counts"]?.objectValue?["subscriptions"]?.int64Value == 1 && erased.json["counts"]?.objectValue?["customer_purchases"]?.int64Value == 1)
        let readBack = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/erasures/privacy-7", key: erase)
        #expect(readBack.status == 200 && readBack.json["completedAt"] == erased.json["completedAt"])
        #expect(try await scene.request("GET", "/v1/apps/\(scene.bundleId)/erasures/privacy-7", key: read).status == 403)
        #expect(try await scene.request("GET", "/v1/apps/\(scene.bundleId)/erasures/none", key: erase).status == 404)
        let again = try await scene.request("DELETE", path, key: erase)
        #expect(again.status == 202 && again.json["completedAt"] == erased.json["completedAt"], "the same request id answers the same erasure")
        let other = try await scene.request("DELETE", "/v1/apps/\(scene.bundleId)/customers/\(b)?requestId=privacy-7", key: erase)
        #expect(other.status == 409 && other.json["error"]?.objectValue?["code"] == .string("request_id_taken"))
        #expect(try await scene.request("DELETE", "/v1/apps/\(scene.bundleId)/customers/\(a)?requestId=bad%20id", key: erase).status == 400)

        let aAfter = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/customers/\(a)", key: read)
        #expect(aAfter.status == 200 && aAfter.json["subscriptions"]?.arrayValue?.isEmpty == true)
        let needles = [a, aEvent.originalTransactionId, aEvent.transactionId]
        #expect(try await TestDatabase.with(scene.scene.database) { try await DatabaseScan.mentions(of: needles, in: $0) }.isEmpty)

        // A replay of the notifications topic (the purchase records among it) keeps A erased, B as it was.
        await scene.fixture.stopOneByOne(scene.scene.workers)
        let replay = try await scene.fixture.pipelinectl(["replay", "--group", scene.scene.group, "--topic", scene.fixture.topic, "--to", "earliest"])
        #expect(replay.status == 0, "\(replay.output)")
        scene.scene.workers = [try await scene.fixture.startWorker(group: scene.scene.group, postgresURL: scene.scene.database, extra: erasureKey).process]
        #expect(try await scene.fixture.waitForLag(group: scene.scene.group))
        let left = try await TestDatabase.with(scene.scene.database) { try await DatabaseScan.mentions(of: needles, in: $0) }
        #expect(left.isEmpty, "A came back in \(left)")
        let bAfter = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/customers/\(b)", key: read)
        #expect(bAfter.json == bBefore.json)

        // Without the erasure key the service says so.
        try await scene.startAPI()
        let unconfigured = try await scene.request("DELETE", "/v1/apps/\(scene.bundleId)/customers/\(b)", key: erase)
        #expect(unconfigured.status == 503 && unconfigured.json["error"]?.objectValue?["code"] == .string("erasure_not_configured"))
        await scene.finish()
    }
}
