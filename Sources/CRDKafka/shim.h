// The C surface of librdkafka that KafkaClient uses: Debian's librdkafka-dev headers plus one helper of ours.
#ifndef CRDKAFKA_SHIM_H
#define CRDKAFKA_SHIM_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

/// rd_kafka_producev is variadic and cannot be called from Swift; this fixes its argument list.
/// The value and key are copied (RD_KAFKA_MSG_F_COPY); on success librdkafka owns `headers`, on failure the
/// caller still does. `partition` may be RD_KAFKA_PARTITION_UA, `timestamp` 0 for "now".
static inline rd_kafka_resp_err_t crdkafka_produce(rd_kafka_t *rk, const char *topic, int32_t partition,
                                                   const void *value, size_t value_length,
                                                   const void *key, size_t key_length,
                                                   rd_kafka_headers_t *headers, int64_t timestamp,
                                                   void *message_opaque) {
    return rd_kafka_producev(rk,
                             RD_KAFKA_V_TOPIC(topic),
                             RD_KAFKA_V_PARTITION(partition),
                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                             RD_KAFKA_V_VALUE((void *)value, value_length),
                             RD_KAFKA_V_KEY(key, key_length),
                             RD_KAFKA_V_HEADERS(headers),
                             RD_KAFKA_V_TIMESTAMP(timestamp),
                             RD_KAFKA_V_OPAQUE(message_opaque),
                             RD_KAFKA_V_END);
}

#endif
