#!/usr/bin/env bash
# PostgreSQL for the store's tests at 127.0.0.1:5432, database `test`, user postgres without a password (trust on loopback):
# installed by scripts/apt-deps.sh where missing, started if stopped, the database created if missing. Idempotent.
# Not root: leave things as they are (the tests skip PostgreSQL and say why, unless CI=true, where they fail).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "postgres.sh: not root, PostgreSQL left as it is" >&2; exit 0; }
command -v pg_ctlcluster >/dev/null || bash scripts/apt-deps.sh postgresql
command -v pg_ctlcluster >/dev/null || { echo "postgres.sh: PostgreSQL could not be installed" >&2; exit 1; }
version=$(ls /etc/postgresql | sort -V | tail -1)
[ -n "$version" ] || { echo "postgres.sh: no PostgreSQL cluster under /etc/postgresql" >&2; exit 1; }
hba=/etc/postgresql/$version/main/pg_hba.conf
# the tests connect as postgres over TCP without a password: trust it on loopback (first matching line wins)
grep -qE "^host\s+all\s+all\s+127\.0\.0\.1/32\s+trust" "$hba" || sed -i "1i host all all 127.0.0.1/32 trust" "$hba"
pg_ctlcluster --skip-systemctl-redirect "$version" main status >/dev/null 2>&1 || pg_ctlcluster --skip-systemctl-redirect "$version" main start
pg_ctlcluster --skip-systemctl-redirect "$version" main reload >/dev/null
for _ in $(seq 60); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
pg_isready -h 127.0.0.1 -p 5432 >/dev/null || { echo "postgres.sh: PostgreSQL does not answer on 127.0.0.1:5432" >&2; exit 1; }
psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 || psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE test"
