#!/bin/sh
# Entrypoint of deploy/postgres.Dockerfile: create the cluster on an empty $PGDATA (superuser
# $POSTGRES_USER, password $POSTGRES_PASSWORD or trust when it is empty, database $POSTGRES_DB),
# then run the server in the foreground on every interface. Extra arguments go to `postgres`.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  auth=trust
  pwfile=$(mktemp)
  if [ -n "$POSTGRES_PASSWORD" ]; then
    auth=scram-sha-256
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  fi
  initdb --pgdata="$PGDATA" --username="$POSTGRES_USER" --encoding=UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host="$auth" ${POSTGRES_PASSWORD:+--pwfile="$pwfile"} >/dev/null
  rm -f "$pwfile"
  printf 'host all all all %s\n' "$auth" >> "$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    echo "CREATE DATABASE \"$POSTGRES_DB\";" |
      postgres --single -D "$PGDATA" -c log_min_messages=warning postgres >/dev/null
  fi
  echo "fedldp-postgres: created the cluster in $PGDATA (database $POSTGRES_DB, host auth $auth)"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
