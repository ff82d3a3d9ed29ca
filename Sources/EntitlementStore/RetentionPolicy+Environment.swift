import PipelineConfiguration

extension RetentionPolicy {
    /// The variables of `RetentionPolicy`, each a number of days or `keep`.
    public static let environmentKeys = RetentionPolicy().stores.map(\.variable)

    /// Reads each store's limit: a number of days (1…36 500) or `keep` (no limit); the webhook delivery log's and the
    /// published events' as durations (`30d`), as their services read them.
    public static func fromEnvironment(_ environment: EnvironmentReader) throws(ConfigurationError) -> RetentionPolicy {
        var policy = RetentionPolicy()
        func days(_ variable: String, _ defaultValue: Int?) throws(ConfigurationError) -> Int? {
            guard let text = environment.optionalString(variable) else { return defaultValue }
            if text.lowercased() == "keep" { return nil }
            guard let value = Int(text), (1...36_500).contains(value) else {
                throw ConfigurationError(variable: variable, reason: "\"\(text.prefix(20))\" is neither a number of days (1…36500) nor keep")
            }
            return value
        }
        policy.archiveDays = try days("ARCHIVE_RETENTION_DAYS", policy.archiveDays)
        policy.deadLetterRecordDays = try days("DEAD_LETTER_RECORD_RETENTION_DAYS", policy.deadLetterRecordDays)
        policy.purchaseClaimDays = try days("PURCHASE_CLAIM_RETENTION_DAYS", policy.purchaseClaimDays)
        policy.consumptionRequestDays = try days("CONSUMPTION_REQUEST_RETENTION_DAYS", policy.consumptionRequestDays)
        policy.consoleAuditDays = try days("CONSOLE_AUDIT_RETENTION_DAYS", policy.consoleAuditDays)
        policy.erasedEventIdsDays = try days("ERASED_EVENT_IDS_RETENTION_DAYS", policy.erasedEventIdsDays)
        policy.offerSignatureDays = try days("OFFER_SIGNATURE_RETENTION_DAYS", policy.offerSignatureDays)
        // Durations, as the webhooks service and the relay read them (`30d`, `36h`), or `keep`.
        func duration(_ variable: String, _ defaultValue: Duration?) throws(ConfigurationError) -> Duration? {
            guard let text = environment.optionalString(variable) else { return defaultValue }
            if text.lowercased() == "keep" { return nil }
            guard let milliseconds = DurationText.milliseconds(text), milliseconds >= 60_000 else {
                throw ConfigurationError(variable: variable, reason: "\"\(text.prefix(40))\" is neither a duration of at least a minute (e.g. 30d, 36h, 90m) nor keep")
            }
            return .milliseconds(milliseconds)
        }
        policy.webhookDeliveries = try duration("WEBHOOK_DELIVERY_RETENTION", policy.webhookDeliveries)
        policy.publishedEvents = try duration("EVENTS_OUTBOX_RETENTION", policy.publishedEvents)
        return policy
    }
}
