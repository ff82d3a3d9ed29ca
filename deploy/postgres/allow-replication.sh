#!/bin/sh
# Run once by the postgres image when it creates the primary's cluster (docker-entrypoint-initdb.d): lets the
# streaming standby of docker-compose.yml (`postgres-replica`, profile `replica`) copy it and follow its WAL.
set -e
echo "host replication ${POSTGRES_USER:-postgres} all scram-sha-256" >>"$PGDATA/pg_hba.conf"
