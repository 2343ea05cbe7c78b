#!/bin/sh
# Start (or find already running) a throwaway PostgreSQL cluster listening
# only on a unix socket, and print the URL that `mvkv bench --target
# postgres=URL` and the tests (MVKV_TEST_POSTGRES_URL) take. Idempotent: a
# second call finds the running server and prints the same URL.
#
# Environment: PGBIN (server binaries, default /usr/lib/postgresql/15/bin),
# MVKV_PGDATA (cluster directory, default /tmp/mvkv-pgdata), MVKV_PGSOCK
# (socket directory, default /tmp/mvkv-pgsock), MVKV_PGUSER (the OS user to
# run the server as when started by root, default pgtest; PostgreSQL refuses
# to run as root).
set -eu
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
DATA=${MVKV_PGDATA:-/tmp/mvkv-pgdata}
SOCK=${MVKV_PGSOCK:-/tmp/mvkv-pgsock}
DB=mvkv
if [ ! -x "$PGBIN/initdb" ]; then
	echo "start-postgres.sh: no PostgreSQL server binaries in $PGBIN (apt-get install -y postgresql-15)" >&2
	exit 1
fi
if [ "$(id -u)" = 0 ]; then
	PGUSER=${MVKV_PGUSER:-pgtest}
	id "$PGUSER" >/dev/null 2>&1 || useradd -m "$PGUSER"
	as() { su "$PGUSER" -s /bin/sh -c "$1"; }
else
	PGUSER=$(id -un)
	as() { sh -c "$1"; }
fi
mkdir -p "$SOCK"
[ "$(id -u)" = 0 ] && chown "$PGUSER" "$SOCK"
if [ ! -f "$DATA/PG_VERSION" ]; then
	mkdir -p "$DATA"
	[ "$(id -u)" = 0 ] && chown "$PGUSER" "$DATA"
	as "'$PGBIN/initdb' -D '$DATA' -U '$PGUSER' -A trust >'$DATA.initdb.log' 2>&1"
fi
if ! as "'$PGBIN/pg_ctl' -D '$DATA' status" >/dev/null 2>&1; then
	as "'$PGBIN/pg_ctl' -D '$DATA' -w -l '$DATA.log' -o \"-k '$SOCK' -c listen_addresses='' -c max_connections=200\" start" >/dev/null
fi
if ! as "'$PGBIN/psql' -h '$SOCK' -U '$PGUSER' -d postgres -Atc \"select 1 from pg_database where datname='$DB'\"" | grep -q 1; then
	as "'$PGBIN/createdb' -h '$SOCK' -U '$PGUSER' '$DB'"
fi
echo "postgres://$PGUSER@/$DB?host=$SOCK"
