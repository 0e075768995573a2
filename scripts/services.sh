#!/usr/bin/env bash
# Makes sure the Postgres (127.0.0.1:5432, database `test`) and Redis (127.0.0.1:6379) that the
# integration tests use are up. Starts them when they are installed but stopped; fails loudly when
# they cannot be reached, because tests never skip a missing service.
set -euo pipefail
up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! up 5432; then
  echo "[services] Postgres not answering; trying to start it" >&2
  (command -v pg_ctlcluster >/dev/null && pg_ctlcluster --skip-systemctl-redirect 15 main start) ||
    (command -v service >/dev/null && service postgresql start) || true
  for _ in $(seq 30); do up 5432 && break; sleep 1; done
fi
if ! up 6379; then
  echo "[services] Redis not answering; trying to start it" >&2
  (command -v redis-server >/dev/null && redis-server --daemonize yes --bind 127.0.0.1 --port 6379) ||
    (command -v service >/dev/null && service redis-server start) || true
  for _ in $(seq 30); do up 6379 && break; sleep 1; done
fi
up 5432 || { echo "[services] FAIL: Postgres unreachable on 127.0.0.1:5432" >&2; exit 1; }
up 6379 || { echo "[services] FAIL: Redis unreachable on 127.0.0.1:6379" >&2; exit 1; }
psql -h 127.0.0.1 -U postgres -d test -qtAc 'select 1' >/dev/null ||
  { echo "[services] FAIL: cannot open database 'test' as postgres on 127.0.0.1" >&2; exit 1; }
echo "[services] Postgres and Redis are up" >&2
