import AppStoreNotifications
import Foundation
import Testing

/// Every vector of ../shared/vectors/generated, through the same entry point `pipelinectl verify` uses.
@Suite("Generated vectors")
struct GeneratedVectorTests {
    static let vectors: [VectorFile] = {
        guard Fixtures.vectorsPresent else { return [] }
        return VectorFile.all(in: Fixtures.vectorsDirectory.appendingPathComponent("generated/vectors"))
    }()

    static let testRoot: [UInt8] = (try? Fixtures.bytes(Fixtures.vectorsDirectory.appendingPathComponent("generated/test-root-ca.der"))) ?? []

    @Test("the vector set is complete")
    func vectorSetIsComplete() throws {
        try Fixtures.requireVectors()
        let manifest = try Fixtures.json(Fixtures.vectorsDirectory.appendingPathComponent("generated/manifest.json"))
        let total = manifest["counts"]?.objectValue?["total"]?.int64Value
        #expect(total == Int64(Self.vectors.count))
        #expect(Self.vectors.count >= 150)
    }

    @Test("accepts and rejects as labelled, decoding accepts exactly", arguments: vectors)
    func vector(_ vector: VectorFile) async throws {
        let object = vector.object
        let config = try #require(object["verifier"]?.objectValue)
        let environment = try #require(config["environment"]?.stringValue.flatMap(Environment.init(rawValue:)))
        let verifier = try SignedPayloadVerifier(
            configuration: .init(
                apps: [AppIdentity(bundleId: config["bundleId"]?.stringValue, appAppleId: config["appAppleId"]?.int64Value, environments: [environment])],
                trustedRoots: [Self.testRoot]))
        let line: String
        if let body = object["httpBody"]?.stringValue {
            line = body
        } else {
            line = NotificationRequestBodyLine.make(try #require(object["signedPayload"]?.stringValue))
        }
        let report = await VerificationReport.verify(line: Array(line.utf8), with: verifier, kind: nil)
        let expectAccept = object["expect"] == .string("accept")
        #expect(report.isValid == expectAccept, "\(object["reason"]?.stringValue ?? ""): got \(report.json["error"]?.serialized ?? "valid") \(report.json["reason"]?.serialized ?? "")")
        if expectAccept, report.isValid {
            let decoded = try #require(object["decoded"]?.objectValue)
            for field in ["payload", "transactionInfo", "renewalInfo", "appTransactionInfo"] {
                let expected = try #require(decoded[field])
                let actual = try #require(report.json[field])
                #expect(sameJSON(actual, expected), "\(field) differs from the vector's decoded content")
            }
        }
    }
}

/// Builds the HTTP body a vector's signedPayload would be POSTed in.
enum NotificationRequestBodyLine {
    static func make(_ signedPayload: String) -> String {
        JSONObject(["signedPayload": .string(signedPayload)]).serialized
    }
}
