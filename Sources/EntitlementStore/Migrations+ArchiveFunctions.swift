extension Migrations {
    /// The outer payload's exact JSON text, nested JWSs back in place (ArchivedJWS.outerPayload in SQL); its argument is
    /// the archive's row type, so a migration that replaces the table creates it again.
    static let archivedPayloadTextFunction = """
        CREATE FUNCTION archived_payload_text(n notification_archive) RETURNS text STABLE LANGUAGE plpgsql AS $$
        DECLARE
            result text;
        BEGIN
            IF n.body IS NULL THEN
                RETURN NULL;
            END IF;
            result := n.body::text;
            FOR i IN REVERSE coalesce(array_length(n.nested_bodies, 1), 0)..1 LOOP
                result := replace(result, '"\\u0001' || (i - 1) || '"',
                    '"' || (SELECT segment FROM jws_headers WHERE sha256 = n.nested_header_sha256[i]) || '.'
                        || jws_base64url(n.nested_bodies[i]::text) || '.' || n.nested_signatures[i] || '"');
            END LOOP;
            RETURN result;
        END
        $$
        """

    /// The exact signedPayload Apple signed, whichever way the row is stored (the archive's row type, as above).
    static let archivedSignedPayloadFunction = """
        CREATE FUNCTION archived_signed_payload(n notification_archive) RETURNS text STABLE LANGUAGE sql AS $$
            SELECT coalesce(n.signed_payload,
                (SELECT segment FROM jws_headers WHERE sha256 = n.header_sha256) || '.' || jws_base64url(archived_payload_text(n))
                    || '.' || n.signature)
        $$
        """

    /// The archive as it always read: the exact JWS and the decoded outer payload, for any row, in the columns (and the
    /// order) of migrations 1-12.
    static let notificationsView = """
        CREATE VIEW notifications AS
        SELECT n.notification_uuid, n.notification_type, n.subtype, n.signed_date, n.environment, n.bundle_id,
            n.original_transaction_id, archived_signed_payload(n) AS signed_payload,
            coalesce(n.payload, archived_payload_text(n)::jsonb) AS payload,
            n.kafka_topic, n.kafka_partition, n.kafka_offset, n.received_at, n.stored_at, n.source
        FROM notification_archive n
        """

    /// The transaction a notification is about, decoded, whichever way the archive stores it (the archive's row type).
    static let archivedTransactionInfoFunction = """
        CREATE FUNCTION archived_transaction_info(n notification_archive) RETURNS jsonb STABLE LANGUAGE sql AS $$
            SELECT CASE
                WHEN n.body IS NOT NULL THEN
                    n.nested_bodies[substr(n.body->'data'->>'signedTransactionInfo', 2)::integer + 1]::jsonb
                ELSE convert_from(decode(
                        translate(split_part(n.payload->'data'->>'signedTransactionInfo', '.', 2), '-_', '+/')
                        || repeat('=', (4 - length(split_part(n.payload->'data'->>'signedTransactionInfo', '.', 2)) % 4) % 4),
                    'base64'), 'UTF8')::jsonb
                END
        $$
        """
}
