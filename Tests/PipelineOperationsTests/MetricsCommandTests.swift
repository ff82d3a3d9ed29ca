import Foundation
import Testing
import PipelineTestSupport
import TestGates

/// `pipelinectl metrics`, `products` and `exchange-rates` as an operator runs them: refusals with their reason,
/// and the figures in each output format (the figures themselves are held to hand-computed values by
/// SubscriptionMetricsTests).
@Suite("pipelinectl metrics, products, exchange-rates", .serialized, .requiresPostgres)
struct MetricsCommandTests {
    @Test("exchange-rates load refuses a bad file whole, naming the line; products set refuses an unknown duration; metrics prints table, CSV and JSON")
    func commands() async throws {
        let base = try RequiredServices.postgresURL
        let database = try await TestDatabase.create("m" + UUID().uuidString.prefix(8).lowercased(), on: base)
        #expect(try await runPipelinectl(["migrate"], postgresURL: database).status == 0)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        let bad = directory.appendingPathComponent("bad.csv")
        try Data("date,currency,reporting_currency,rate\n2026-01-01,EUR,USD,1.10\n2026-13-01,EUR,USD,1.2\n".utf8).write(to: bad)
        let refused = try await runPipelinectl(["exchange-rates", "load", "--from-file", bad.path], postgresURL: database, includeErrors: true)
        #expect(refused.status != 0 && refused.output.contains("line 3"), "\(refused.output)")
        let noHeader = directory.appendingPathComponent("no-header.csv")
        try Data("2026-01-01,EUR,USD,1.10\n".utf8).write(to: noHeader)
        #expect(try await runPipelinectl(["exchange-rates", "load", "--from-file", noHeader.path], postgresURL: database, includeErrors: true).output.contains("header"))
        let good = directory.appendingPathComponent("rates.csv")
        try Data("date,currency,reporting_currency,rate\n2026-01-01,EUR,USD,1.10\n2026-03-01,EUR,USD,1.20\n".utf8).write(to: good)
        let loaded = try await runPipelinectl(["exchange-rates", "load", "--from-file", good.path], postgresURL: database)
        #expect(loaded.status == 0 && loaded.output.contains("loaded 2 rate(s)"), "\(loaded.output)")
        // Loading again replaces, never duplicates.
        #expect(try await runPipelinectl(["exchange-rates", "load", "--from-file", good.path], postgresURL: database).status == 0)

        let unknownDuration = try await runPipelinectl(["products", "set", "--product-id", "p", "--duration", "P5M"], postgresURL: database, includeErrors: true)
        #expect(unknownDuration.status != 0 && unknownDuration.output.contains("--duration must be one of"), "\(unknownDuration.output)")
        #expect(try await runPipelinectl(["products", "set", "--product-id", "com.example.p", "--duration", "P3M"], postgresURL: database).status == 0)
        let products = try await runPipelinectl(["products", "list", "--json"], postgresURL: database)
        #expect(products.output.contains(#""productId":"com.example.p""#) && products.output.contains(#""source":"manual""#), "\(products.output)")

        let unknownMetric = try await runPipelinectl(["metrics", "arpu", "--from", "2026-01-01", "--to", "2026-03-31"], postgresURL: database, includeErrors: true)
        #expect(unknownMetric.status != 0 && unknownMetric.output.contains("unknown metric"), "\(unknownMetric.output)")
        let backwards = try await runPipelinectl(["metrics", "mrr", "--from", "2026-03-01", "--to", "2026-01-01"], postgresURL: database, includeErrors: true)
        #expect(backwards.status != 0 && backwards.output.contains("--from must be before --to"), "\(backwards.output)")

        let csv = try await runPipelinectl(["metrics", "mrr", "--from", "2026-01-15", "--to", "2026-03-31", "--csv"], postgresURL: database)
        #expect(csv.status == 0)
        #expect(csv.output.split(separator: "\n") == [
            "bucket_start,bucket_end,currency,mrr,arr,active_paid,unconverted",
            "2026-01-15T00:00:00Z,2026-02-01T00:00:00Z,USD,0.00,0.00,0,0",
            "2026-02-01T00:00:00Z,2026-03-01T00:00:00Z,USD,0.00,0.00,0,0",
            "2026-03-01T00:00:00Z,2026-04-01T00:00:00Z,USD,0.00,0.00,0,0",
        ], "the first bucket is clipped to the range, --to is included")
        let json = try await runPipelinectl(["metrics", "churn", "--from", "2026-01-01", "--to", "2026-01-14", "--bucket", "week", "--json"], postgresURL: database)
        #expect(json.output.hasPrefix(#"[{"bucket_start":"2026-01-01T00:00:00Z","bucket_end":"2026-01-05T00:00:00Z","active_at_start":0,"churned":0,"churn_rate":null"#),
                "weeks start on Monday: \(json.output)")
        let table = try await runPipelinectl(["metrics", "active-subscriptions", "--from", "2026-01-01", "--to", "2026-01-02", "--bucket", "day"], postgresURL: database)
        #expect(table.output.split(separator: "\n").first?.split(separator: " ") == ["bucket_start", "bucket_end", "active_paid", "active_trials", "active_family_shared"])
        // A long range is asked for in pieces; the buckets are the same as in one query.
        // Every bucket size (a quarter is three months: PostgreSQL has no '1 quarter' interval).
        for (bucket, rows) in [("day", 90), ("week", 14), ("month", 3), ("quarter", 1), ("year", 1)] {
            let run = try await runPipelinectl(["metrics", "active-subscriptions", "--from", "2026-01-01", "--to", "2026-03-31", "--bucket", bucket, "--csv"],
                                         postgresURL: database, includeErrors: true)
            #expect(run.status == 0 && run.output.split(separator: "\n").count == rows + 1, "\(bucket): \(run.output)")
        }
        // RevenueCat's chart names work too.
        let alias = try await runPipelinectl(["metrics", "refund-rate", "--from", "2026-01-01", "--to", "2026-01-31", "--csv"], postgresURL: database)
        #expect(alias.output.hasPrefix("bucket_start,bucket_end,currency,paid_periods,refunded,refund_rate"), "\(alias.output)")
        let year = try await runPipelinectl(["metrics", "new-subscriptions", "--from", "2024-01-01", "--to", "2025-12-31", "--csv"], postgresURL: database)
        #expect(year.output.split(separator: "\n").count == 25 && year.output.contains("2024-12-01T00:00:00Z,2025-01-01T00:00:00Z"))

        // The rollups (built by the migration on this empty database): both sources give the same rows, a filter
        // they do not keep is refused when they are asked for, and the compare finds nothing and says so.
        let status = try await runPipelinectl(["metrics", "rollups", "status"], postgresURL: database)
        #expect(status.status == 0 && status.output.contains("built: yes"), "\(status.output)")
        let fromRollups = try await runPipelinectl(["metrics", "churn", "--from", "2026-01-01", "--to", "2026-03-31", "--csv", "--source", "rollups"], postgresURL: database)
        let inFull = try await runPipelinectl(["metrics", "churn", "--from", "2026-01-01", "--to", "2026-03-31", "--csv", "--source", "full"], postgresURL: database)
        #expect(fromRollups.status == 0 && fromRollups.output == inFull.output && fromRollups.output.split(separator: "\n").count == 4, "\(fromRollups.output)")
        let filtered = try await runPipelinectl(["metrics", "mrr", "--from", "2026-01-01", "--to", "2026-03-31", "--storefront", "USA", "--source", "rollups"],
                                                postgresURL: database, includeErrors: true)
        #expect(filtered.status != 0 && filtered.output.contains("a storefront filter"), "\(filtered.output)")
        let compare = try await runPipelinectl(["metrics", "compare", "--from", "2026-01-01", "--to", "2026-03-31"], postgresURL: database)
        #expect(compare.status == 0 && compare.output.contains("0 difference(s) in 9 metrics"), "\(compare.output)")
        let notDays = try await runPipelinectl(["metrics", "compare", "--from", "2026-01-01T12:00:00Z", "--to", "2026-03-31"], postgresURL: database, includeErrors: true)
        #expect(notDays.status != 0 && notDays.output.contains("are UTC days"), "\(notDays.output)")
    }
}
