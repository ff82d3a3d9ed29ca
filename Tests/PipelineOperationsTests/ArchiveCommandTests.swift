import AppStoreNotifications
import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing
import PipelineTestSupport
import TestGates

/// `pipelinectl archive show --raw` gives back the exact signedPayload from the compact archive, and
/// `pipelinectl verify` verifies it again: the archive is evidence, not only a record.
@Suite("pipelinectl archive against a real PostgreSQL", .serialized, .requiresPostgres)
struct ArchiveCommandTests {
    func pipelinectl(_ arguments: [String], database: String, input: String? = nil) async throws -> (status: Int32, output: String) {
        try await runPipelinectl(arguments, postgresURL: database, input: input)
    }

    @Test("show --raw prints the exact JWS from the compact archive and verify accepts it; --json says how it is stored; an unknown UUID exits 1")
    func showRawVerifies() async throws {
        let database = try await TestDatabase.createMigrated("a")
        let authority = try TestCertificateAuthority()
        let minter = NotificationMinter(chain: try authority.issueChain())
        let verifier = try SignedPayloadVerifier(
            configuration: .init(apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER]))
        let signed = NotificationMinter.lifecycleEvents(subscriptions: 2).prefix(3).map(minter.signedNotification)
        var records: [StoredNotification] = []
        for jws in signed { records.append(StoredNotification(verified: try await verifier.verifyNotification(jws), signedPayload: jws)) }
        let batch = records
        try await TestDatabase.with(database) { client in
            _ = try await EntitlementStore(client: client, logger: Logger(label: "archive-tests")).store(batch)
        }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("root-\(UUID().uuidString).der")
        try Data(authority.rootDER).write(to: root)
        defer { try? FileManager.default.removeItem(at: root) }

        for record in records {
            let shown = try await pipelinectl(["archive", "show", "--uuid", record.deduplicationKey, "--raw"], database: database)
            #expect(shown.status == 0 && shown.output == record.signedPayload + "\n", "byte for byte")
            let verified = try await pipelinectl(["verify", "--root", root.path, "--bundle-id", minter.bundleId], database: database, input: shown.output)
            #expect(verified.status == 0 && verified.output.contains("\"valid\":true"), "\(verified.output.prefix(300))")
            let json = try await pipelinectl(["archive", "show", "--uuid", record.deduplicationKey, "--json"], database: database)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any])
            #expect(object["storage"] as? String == "compact" && object["signedPayloadBytes"] as? Int == record.signedPayload.utf8.count)
            #expect((object["payload"] as? [String: Any])?["notificationUUID"] as? String == record.deduplicationKey)
        }
        #expect(try await pipelinectl(["archive", "show", "--uuid", "no-such-notification", "--raw"], database: database).status == 1)
        let compact = try await pipelinectl(["archive", "compact", "--json"], database: database)
        #expect(compact.status == 0 && compact.output.contains("\"moved\":0"), "nothing raw to move: \(compact.output)")
    }
}
