import Foundation
import PipelineTestSupport
import PostgresNIO
import StoreTestSupport
import TestGates
import Testing

/// `pipelinectl migrate online` as an operator runs it (docs/scale.md, "Migrating a large deployment online"): refused
/// with the step to take before version 27, the copy and the swap on a database at 27, refused once migration 28 is in.
@Suite("pipelinectl migrate online", .serialized, .requiresPostgres)
struct MigrateOnlineCommandTests {
    @Test("refused before version 27 naming `migrate --through 27`; at 27 it copies in batches and --swap applies 28; then refused as done")
    func onlineThenSwap() async throws {
        let database = try await TestDatabase.create("mo" + UUID().uuidString.prefix(8).lowercased(), on: try RequiredServices.postgresURL)
        #expect(try await runPipelinectl(["migrate", "--through", "26"], postgresURL: database).status == 0)
        let early = try await runPipelinectl(["migrate", "online"], postgresURL: database, includeErrors: true)
        #expect(early.status != 0 && early.output.contains("migrate --through 27"), "\(early.output)")
        let through = try await runPipelinectl(["migrate", "--through", "27"], postgresURL: database)
        #expect(through.status == 0 && through.output.contains("applied 27") && !through.output.contains("applied 28"), "\(through.output)")

        _ = try await FreshDatabase.withClient(database) { client in
            try await client.query(
                """
                INSERT INTO entitlement_events_outbox (event_id, event_type, source, subject, event_time, environment, bundle_id, data, created_at, published_at)
                SELECT 'e' || g, 'subscription.renewed', 's', 'otid-' || g, now(), 'Production', 'app', '{}', now() - g * interval '1 hour', now()
                FROM generate_series(1, 2500) g
                """)
        }
        let online = try await runPipelinectl(["migrate", "online", "--batch-size", "1000", "--swap"], postgresURL: database)
        #expect(online.status == 0, "\(online.output)")
        #expect(online.output.contains("copied entitlement_events_outbox: 2500 rows read, 2500 copied in 3 batches"), "\(online.output)")
        #expect(online.output.contains("entitlement_events_outbox: 2500 rows, twin 2500") && online.output.contains("applied 28"), "\(online.output)")
        let done = try await runPipelinectl(["migrate", "online"], postgresURL: database, includeErrors: true)
        #expect(done.status != 0 && done.output.contains("partitioned already"), "\(done.output)")
        #expect(try await runPipelinectl(["migrate"], postgresURL: database).output.contains("schema is up to date"))
    }
}
