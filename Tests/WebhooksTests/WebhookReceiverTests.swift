import Foundation
import TestSupport
import Testing

/// The loopback receiver the webhook tests deliver to: what it records is what those tests judge by.
@Suite("The tests' webhook receiver")
struct WebhookReceiverTests {
    @Test("/busy: two attempts of one delivery arriving together get one 429 and one 200, each recorded with its status")
    func busyDecidesOncePerDelivery() async throws {
        let receiver = WebhookReceiver(busyRetryAfterSeconds: 1)
        let port = try await receiver.start()
        defer { Task { await receiver.stop() } }
        for round in 0..<20 {
            let id = "msg_race_\(round)"
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        try await HTTPTestConnection(port: port).send(
                            method: "POST", path: "/busy", headers: ["webhook-id": id, "Content-Type": "application/json"], body: Array("{}".utf8)
                        ).status
                    }
                }
                var statuses: [Int] = []
                for try await status in group { statuses.append(status) }
                return statuses.sorted()
            }
            #expect(statuses == [200, 429], "round \(round): \(statuses)")
            let recorded = receiver.deliveries.filter { $0.id == id }.map(\.status).sorted()
            #expect(recorded == [200, 429], "round \(round): recorded \(recorded)")
        }
    }
}
