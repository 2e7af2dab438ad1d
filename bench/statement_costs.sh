#!/usr/bin/env bash
# Where PostgreSQL's time goes in a drain, statement by statement (planning and execution).
#
#   bench/statement_costs.sh 20000            # N jobs: enqueue, fill, drain with one runjobs
#   bench/statement_costs.sh 20000 --workers 2
#
# pg_stat_statements needs shared_preload_libraries, a server restart: so this starts a
# throwaway cluster of its own (initdb in a temp dir, port 5499 or $STATEMENTS_PORT, the
# postgres user), runs bench/drain.py against it with the arguments given, prints the
# statements by total time with µs per row, and stops and removes the cluster. Run as root
# (initdb runs as the postgres user) or as the user owning the PostgreSQL binaries.
set -euo pipefail
cd "$(dirname "$0")/.."

bindir="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
port="${STATEMENTS_PORT:-5499}"
dir="$(mktemp -d /tmp/django_jobs_statements.XXXXXX)"
as_owner() { if [ "$(id -u)" = 0 ]; then su postgres -c "$*"; else bash -c "$*"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$dir"
stop() {
    as_owner "$bindir/pg_ctl -D $dir/data -m immediate stop" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap stop EXIT

as_owner "$bindir/initdb -D $dir/data -A trust -U postgres" >"$dir/initdb.log"
as_owner "$bindir/pg_ctl -D $dir/data -l $dir/log -w start -o '-p $port -k $dir \
    -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on \
    -c pg_stat_statements.track=all'" >/dev/null
psql -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE EXTENSION pg_stat_statements"

DATABASE_URL="postgres://postgres@127.0.0.1:$port/django_jobs" .venv/bin/python bench/drain.py "$@"

psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -P pager=off -c "
SELECT calls, rows, round(total_plan_time::numeric) AS plan_ms, round(total_exec_time::numeric) AS exec_ms,
       round((total_plan_time / nullif(rows, 0) * 1000)::numeric, 1) AS plan_us_row,
       round((total_exec_time / nullif(rows, 0) * 1000)::numeric, 1) AS exec_us_row,
       left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement
FROM pg_stat_statements
WHERE query !~* '^(CREATE|ALTER|DROP|TRUNCATE|ANALYZE|SET|SHOW|BEGIN|COMMIT)'
ORDER BY total_plan_time + total_exec_time DESC LIMIT 15"
