import AppStoreNotifications
import ArgumentParser
import Foundation
import SubscriptionMetrics

/// `pipelinectl metrics NAME --from D --to D`: subscription metrics from our own rows (docs/metrics.md); `metrics
/// compare` and `metrics rollups` keep the daily rollups they are read from honest (docs/scale.md).
struct MetricsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metrics",
        abstract: "Subscription metrics from the pipeline's own data, and the rollups they are read from.",
        subcommands: [MetricsShowCommand.self, MetricsCompareCommand.self, MetricRollupsCommand.self], defaultSubcommand: MetricsShowCommand.self)
}

/// `pipelinectl metrics [show] NAME --from D --to D`: one metric.
struct MetricsShowCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Subscription metrics (active subscriptions, MRR, churn, trial conversion, refunds, retention) from the pipeline's own data.",
        discussion: """
            NAME is one of: \(SubscriptionMetric.allCases.map(\.rawValue).joined(separator: ", ")) (also known as:
            \(SubscriptionMetric.aliases.keys.sorted().joined(separator: ", "))).
            --from and --to are UTC days (YYYY-MM-DD, --to included) or ISO 8601 instants (--to excluded). Buckets are UTC
            (weeks start on Monday); the first and last are clipped to the range. Production and Sandbox are never mixed.
            Money is gross, in --currency, converted with `pipelinectl exchange-rates load`; a period with no rate is
            left out of the sums and counted in `unconverted`. Apple's price and currency are estimates, not revenue
            recognition: App Store Connect's reports are the source of record.
            """)

    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The metric.") var name: String
    @Option(help: "First day (YYYY-MM-DD, UTC) or instant.") var from: String
    @Option(help: "Last day, included (YYYY-MM-DD, UTC), or an instant, excluded.") var to: String
    @Option(help: "day, week, month, quarter or year.") var bucket = "month"
    @Option(help: "Production or Sandbox.") var environment = "Production"
    @Option(help: "Only this app.") var bundleId: String?
    @Option(help: "Only this product.") var productId: String?
    @Option(help: "Only this storefront (Apple's three-letter code, e.g. USA).") var storefront: String?
    @Option(help: "The reporting currency of money metrics (ISO 4217).") var currency = "USD"
    @Option(help: "Each query's statement timeout, in milliseconds.") var statementTimeoutMs = 120_000
    @Option(help: "automatic (the daily rollups when they can answer: no product or storefront filter, whole UTC days), rollups or full.")
    var source = "automatic"
    @Flag(help: "Print JSON (an array of objects).") var json = false
    @Flag(help: "Print CSV with a header row.") var csv = false

    func validate() throws {
        guard SubscriptionMetric(named: name) != nil else {
            throw ValidationError("unknown metric \(UntrustedText.quoted(name)); one of: \(SubscriptionMetric.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard MetricBucket(rawValue: bucket) != nil else { throw ValidationError("--bucket must be day, week, month, quarter or year") }
        guard ["Production", "Sandbox"].contains(environment) else { throw ValidationError("--environment must be Production or Sandbox") }
        guard currency.utf8.count == 3, currency.allSatisfy({ $0.isASCII && $0.isUppercase }) else {
            throw ValidationError("--currency must be an ISO 4217 code such as USD")
        }
        guard !(json && csv) else { throw ValidationError("give at most one of --json and --csv") }
        guard statementTimeoutMs > 0 else { throw ValidationError("--statement-timeout-ms must be positive") }
        guard MetricSource(rawValue: source) != nil else { throw ValidationError("--source must be automatic, rollups or full") }
        let (start, end) = try range()
        guard start < end else { throw ValidationError("--from must be before --to") }
    }

    /// [from, to) as instants.
    func range() throws -> (Date, Date) {
        (try Self.instant(from, endOfDay: false), try Self.instant(to, endOfDay: true))
    }

    static func instant(_ text: String, endOfDay: Bool) throws -> Date {
        if text.utf8.count == 10, let day = try? Date.ISO8601FormatStyle().year().month().day().parse(text) {
            return endOfDay ? day.addingTimeInterval(86_400) : day
        }
        return Date(timeIntervalSince1970: Double(try parseISO8601(text)) / 1000)
    }

    func run() async throws {
        let metric = SubscriptionMetric(named: name)!
        let bucket = MetricBucket(rawValue: bucket)!
        let (start, end) = try range()
        // Long ranges are asked for in pieces of whole buckets, so a progress line can follow them (the figures are
        // the same: every bucket is computed on its own).
        let pieces = Self.pieces(from: start, to: end, bucket: bucket, bucketsPerPiece: 12)
        let progress = ProgressLine("metrics \(metric.rawValue)")
        let query = MetricQuery(from: start, to: end, bucket: bucket, environment: environment, bundleId: bundleId, productId: productId,
                                storefront: storefront, currency: currency)
        let timeout = statementTimeoutMs
        let source = MetricSource(rawValue: source)!
        if source == .rollups, let refusal = query.rollupRefusal { throw ValidationError("--source rollups: \(refusal)") }
        let reading = try connection.configuration().reads
        let table = try await connection.withMigratedStore { store in
            // What a read needs written is written on the primary: the subscriptions changed since the rollups last
            // saw them, and the product catalog for the metrics that read it (from the rollups' observations, or a
            // full scan). The metric is read where the router says (a replica of POSTGRES_READ_URL that replayed
            // those writes, else the primary: docs/scale.md).
            if source != .full, query.rollupRefusal == nil, try await store.metrics.rollupsBuilt() {
                try await store.metrics.applyRollups(catalog: metric.readsProductCatalog)
            } else if metric.readsProductCatalog {
                _ = try await store.metrics.refreshProductCatalog()
            }
            let reads = try reading.router(primary: store.client, poolSize: 1, logger: toolLogger)
            return try await reads.whileRunning {
                let token = try await reads.currentToken()
                var table = MetricTable(columns: metric.columns, rows: [])
                for (index, piece) in pieces.enumerated() {
                    var part = query
                    (part.from, part.to) = piece
                    let asked = part
                    table.rows += try await reads.read(after: token, timeout: .milliseconds(timeout + 1_000)) { client in
                        try await MetricsStore(client: client, logger: toolLogger).metric(metric, asked, statementTimeoutMilliseconds: timeout, refreshCatalog: false,
                                                                                          source: source)
                    }.rows
                    if pieces.count > 1 { progress.update(index + 1, of: Int64(pieces.count)) }
                }
                return table
            }
        }
        if json {
            printJSON(.array(table.rows.map { row in
                let members = zip(table.columns, row).map { column, value -> JSONObject.Member in
                    JSONObject.Member(key: column, value: Self.jsonCell(column: column, value: value))
                }
                return JSONValue.object(JSONObject(members: members))
            }))
        } else if csv {
            print(table.columns.joined(separator: ","))
            for row in table.rows { print(row.map { Self.csvField($0 ?? "") }.joined(separator: ",")) }
        } else {
            let cells: [[String]] = [table.columns] + table.rows.map { row in row.map { $0 ?? "-" } }
            var widths = [Int](repeating: 0, count: table.columns.count)
            for row in cells {
                for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
            }
            for row in cells {
                var line = ""
                for (index, cell) in row.enumerated() {
                    line += (index == 0 ? "" : "  ") + cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
                }
                print(line)
            }
        }
    }

    /// A cell as JSON: numbers as numbers (PostgreSQL's exact text), buckets and currency codes as strings.
    static func jsonCell(column: String, value: String?) -> JSONValue {
        guard let value else { return .null }
        let numeric = !column.hasPrefix("bucket_") && column != "currency" && Double(value) != nil
        return numeric ? .number(JSONNumber(literal: value)) : .string(value)
    }

    static func csvField(_ value: String) -> String {
        value.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" }) ? "\"" + value.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : value
    }

    /// [from, to) cut at bucket boundaries into pieces of at most `bucketsPerPiece` buckets.
    static func pieces(from: Date, to: Date, bucket: MetricBucket, bucketsPerPiece: Int) -> [(Date, Date)] {
        var calendar = Calendar(identifier: .iso8601)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        func nextBoundary(after date: Date) -> Date {
            let component: Calendar.Component
            var step = 1
            switch bucket {
            case .day: component = .day
            case .week: component = .weekOfYear
            case .month: component = .month
            case .quarter: component = .month; step = 3
            case .year: component = .year
            }
            let start: Date
            switch bucket {
            case .day: start = calendar.startOfDay(for: date)
            case .week: start = calendar.dateInterval(of: .weekOfYear, for: date)!.start
            case .month: start = calendar.dateInterval(of: .month, for: date)!.start
            case .quarter:
                let month = calendar.component(.month, from: date)
                let year = calendar.component(.year, from: date)
                start = calendar.date(from: DateComponents(year: year, month: (month - 1) / 3 * 3 + 1, day: 1))!
            case .year: start = calendar.dateInterval(of: .year, for: date)!.start
            }
            return calendar.date(byAdding: component, value: step, to: start)!
        }
        var pieces: [(Date, Date)] = []
        var pieceStart = from
        while pieceStart < to {
            var pieceEnd = pieceStart
            for _ in 0..<bucketsPerPiece where pieceEnd < to { pieceEnd = nextBoundary(after: pieceEnd) }
            pieceEnd = min(pieceEnd, to)
            pieces.append((pieceStart, pieceEnd))
            pieceStart = pieceEnd
        }
        return pieces
    }
}

/// `pipelinectl metrics compare --from D --to D`: every metric the rollups answer, computed from them and in full;
/// prints each row that differs and exits non-zero when one does.
struct MetricsCompareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compare",
        abstract: "Compare the metrics from the daily rollups with a full recompute; print any difference (exit 1 when there is one).",
        discussion: "Applies the subscriptions changed since the rollups last saw them first. --from and --to are UTC days (--to included).")

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "First day (YYYY-MM-DD, UTC).") var from: String
    @Option(help: "Last day, included (YYYY-MM-DD, UTC).") var to: String
    @Option(help: "day, week, month, quarter or year.") var bucket = "month"
    @Option(help: "Production or Sandbox.") var environment = "Production"
    @Option(help: "Only this app.") var bundleId: String?
    @Option(help: "The reporting currency of money metrics (ISO 4217).") var currency = "USD"
    @Option(help: "Each query's statement timeout, in milliseconds.") var statementTimeoutMs = 600_000

    func validate() throws {
        guard MetricBucket(rawValue: bucket) != nil else { throw ValidationError("--bucket must be day, week, month, quarter or year") }
        guard ["Production", "Sandbox"].contains(environment) else { throw ValidationError("--environment must be Production or Sandbox") }
        for day in [from, to] where !(day.utf8.count == 10 && (try? Date.ISO8601FormatStyle().year().month().day().parse(day)) != nil) {
            throw ValidationError("--from and --to are UTC days (YYYY-MM-DD), not \(UntrustedText.quoted(day))")
        }
    }

    func run() async throws {
        let query = MetricQuery(from: try MetricsShowCommand.instant(from, endOfDay: false), to: try MetricsShowCommand.instant(to, endOfDay: true),
                                bucket: MetricBucket(rawValue: bucket)!, environment: environment, bundleId: bundleId, currency: currency)
        let timeout = statementTimeoutMs
        let differences = try await connection.withMigratedStore { store in
            guard try await store.metrics.rollupsBuilt() else {
                throw ValidationError("the rollups are not built yet: pipelinectl metrics rollups rebuild")
            }
            return try await store.metrics.compareRollups(query, statementTimeoutMilliseconds: timeout)
        }
        for difference in differences { print(difference) }
        let compared = SubscriptionMetric.allCases.map(\.rawValue)
        print("\(differences.count) difference(s) in \(compared.count) metrics (\(compared.joined(separator: ", "))) and the observed product durations")
        if !differences.isEmpty { throw ExitCode(1) }
    }
}

/// `pipelinectl metrics rollups status|apply|rebuild`: the daily rollups the metrics are read from.
struct MetricRollupsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rollups", abstract: "The daily rollups the metrics are read from: status, apply what changed, rebuild.",
        subcommands: [Status.self, Apply.self, Rebuild.self])

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "status", abstract: "Whether they are built, and how many changed subscriptions wait.")
        @OptionGroup var connection: ConnectionOptions

        func run() async throws {
            let status = try await connection.withMigratedStore { store in try await store.metrics.rollupStatus() }
            print("built: \(status.built ? "yes" : "no (pipelinectl metrics rollups rebuild)")  periods: \(status.periods)  changed subscriptions waiting: \(status.pending)")
        }
    }

    struct Apply: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "apply", abstract: "Apply the subscriptions changed since the rollups last saw them (the workers' maintenance round does this too).")
        @OptionGroup var connection: ConnectionOptions

        func run() async throws {
            let applied = try await connection.withMigratedStore { store in try await store.metrics.applyRollups(catalog: true) }
            print("applied \(applied) changed subscription(s)")
        }
    }

    struct Rebuild: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rebuild",
            abstract: "Build the rollups from every stored period (once after upgrading a deployment that holds a book; minutes at ten million).",
            discussion: "The workers keep running: what they change meanwhile is applied after the build. Metrics use the full computation until it ends.")
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "work_mem for the build's sorts (PostgreSQL's units).") var workMemory = "1GB"

        func run() async throws {
            let memory = workMemory
            let started = ContinuousClock.now
            let (periods, applied) = try await connection.withMigratedStore { store in
                let periods = try await store.metrics.rebuildRollups(workMemory: memory)
                return (periods, try await store.metrics.applyRollups(catalog: true))
            }
            print("built from \(periods) subscription period(s) in \(ContinuousClock.now - started); then applied \(applied) changed meanwhile")
        }
    }
}

/// `pipelinectl products list|set|refresh`: the durations metrics normalise prices with.
struct ProductsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "products", abstract: "The product catalog: each subscription product's duration (observed, or set by hand).",
        subcommands: [List.self, Set.self, Refresh.self])

    static let durations = ["P1W", "P1M", "P2M", "P3M", "P6M", "P1Y"]

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the catalog (refreshed from observed periods first).")
        @OptionGroup var listing: ListingOptions

        func run() async throws {
            try await listing.list(empty: "no subscription product observed yet") { store in
                try await store.metrics.refreshProductCatalog()
                return try await store.metrics.productCatalog()
            } object: { entry in
                JSONObject([
                    "productId": .string(entry.productId), "duration": .string(entry.duration), "source": .string(entry.source),
                    "observedPeriods": .number(JSONNumber(entry.observedPeriods)),
                ])
            } line: { entry in
                "\(entry.productId)  \(entry.duration)  \(entry.source)  observed periods: \(entry.observedPeriods)"
            }
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "set", abstract: "Set a product's duration by hand (observation never overrides it).")
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The product id.") var productId: String
        @Option(help: "P1W, P1M, P2M, P3M, P6M or P1Y.") var duration: String

        func validate() throws {
            guard ProductsCommand.durations.contains(duration) else {
                throw ValidationError("--duration must be one of \(ProductsCommand.durations.joined(separator: ", ")), not \(UntrustedText.quoted(duration))")
            }
            guard !productId.isEmpty, productId.utf8.count <= 200 else { throw ValidationError("--product-id must be 1 to 200 bytes") }
        }

        func run() async throws {
            let (productId, duration) = (productId, duration)
            try await connection.withMigratedStore { store in
                try await store.metrics.setProductDuration(productId: productId, duration: duration)
            }
            print("\(productId): \(duration) (manual)")
        }
    }

    struct Refresh: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "refresh", abstract: "Fill the catalog from the durations observed in transactions.")
        @OptionGroup var connection: ConnectionOptions

        func run() async throws {
            let count = try await connection.withMigratedStore { store in
                return try await store.metrics.refreshProductCatalog()
            }
            print("\(count) product(s) observed")
        }
    }
}

/// `pipelinectl exchange-rates load|list`: rates into the reporting currency, from a file (no network fetch).
struct ExchangeRatesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "exchange-rates", abstract: "Exchange rates into a reporting currency, for money metrics.", subcommands: [Load.self])

    struct Load: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "load",
            abstract: "Load rates from a CSV file: header `date,currency,reporting_currency,rate`, one unit of currency = rate units of the reporting currency.",
            discussion: "All rows are checked before any is stored; a bad row stops the load with its line number. A rate given again for a day replaces it.")
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The CSV file.") var fromFile: String

        func run() async throws {
            let rates = try Self.parse(String(contentsOfFile: fromFile, encoding: .utf8))
            let count = try await connection.withMigratedStore { store in
                return try await store.metrics.loadExchangeRates(rates)
            }
            print("loaded \(count) rate(s)")
        }

        static func parse(_ text: String) throws -> [ExchangeRate] {
            var lines = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard let header = lines.first?.lowercased().replacingOccurrences(of: " ", with: ""), header == "date,currency,reporting_currency,rate" else {
                throw ValidationError("the first line must be the header date,currency,reporting_currency,rate")
            }
            lines.removeFirst()
            let day = Date.ISO8601FormatStyle().year().month().day()
            return try lines.enumerated().map { index, line in
                let fields = line.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
                let where_ = "line \(index + 2)"
                guard fields.count == 4 else { throw ValidationError("\(where_): 4 fields expected, found \(fields.count)") }
                guard fields[0].utf8.count == 10, (try? day.parse(fields[0])) != nil else {
                    throw ValidationError("\(where_): \(UntrustedText.quoted(fields[0])) is not a day (YYYY-MM-DD)")
                }
                for code in fields[1...2] where !(code.utf8.count == 3 && code.allSatisfy { $0.isASCII && $0.isUppercase }) {
                    throw ValidationError("\(where_): \(UntrustedText.quoted(code)) is not an ISO 4217 code")
                }
                guard let rate = Double(fields[3]), rate > 0, rate.isFinite, fields[3].allSatisfy({ $0.isNumber || $0 == "." }) else {
                    throw ValidationError("\(where_): \(UntrustedText.quoted(fields[3])) is not a positive decimal rate")
                }
                return ExchangeRate(date: fields[0], currency: fields[1], reportingCurrency: fields[2], rate: fields[3])
            }
        }
    }
}
