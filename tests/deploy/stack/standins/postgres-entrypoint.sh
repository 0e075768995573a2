#!/bin/sh
# The official image's first start, as far as the stack uses it: a cluster owned by POSTGRES_USER with
# POSTGRES_PASSWORD, the database POSTGRES_DB, password logins from the network; then postgres itself.
set -eu
chown -R postgres:postgres "$PGDATA" /var/run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
    chown postgres /tmp/pwfile
    runuser -u postgres -- initdb -D "$PGDATA" --encoding=UTF8 --locale=C.UTF-8 -U "${POSTGRES_USER:-postgres}" --pwfile=/tmp/pwfile \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm /tmp/pwfile
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    db=${POSTGRES_DB:-${POSTGRES_USER:-postgres}}
    if [ "$db" != postgres ]; then
        runuser -u postgres -- postgres --single -D "$PGDATA" postgres <<SQL >/dev/null
CREATE DATABASE "$db" OWNER "${POSTGRES_USER:-postgres}";
SQL
    fi
fi
if [ "$1" = postgres ]; then
    exec runuser -u postgres -- "$@" -D "$PGDATA"
fi
exec "$@"
