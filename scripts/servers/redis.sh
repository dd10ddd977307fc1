#!/usr/bin/env bash
# Test redis-server on 127.0.0.1:(PORT_BASE+379), no persistence, 2 GiB bulk limit.
# usage: redis.sh start|stop|status DIR [PORT_BASE=18000]. start is idempotent; exit 77 when
# redis-server is not installed. PID file: DIR/redis/redis.pid, log: DIR/redis/redis.log.
set -euo pipefail
cmd=${1:?usage: redis.sh start|stop|status DIR [PORT_BASE]}; D=$(realpath -m "${2:?dir}"); BASE=${3:-18000}
P=$D/redis; PORT=$((BASE + 379))
alive() { [[ -s $P/redis.pid && $(cat "$P/port" 2>/dev/null) == $PORT ]] && kill -0 "$(cat "$P/redis.pid")" 2>/dev/null; }
case $cmd in
  status) alive && echo "redis up on 127.0.0.1:$PORT" || { echo "redis down"; exit 1; } ;;
  stop)  # whatever instance the PID file names, on any port
    [[ -s $P/redis.pid ]] && kill -0 "$(cat "$P/redis.pid")" 2>/dev/null || exit 0
    pid=$(cat "$P/redis.pid"); kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true; rm -f "$P/redis.pid" ;;
  start)
    command -v redis-server >/dev/null || { echo "redis-server not installed" >&2; exit 77; }
    alive && exit 0
    [[ -s $P/redis.pid ]] && "$0" stop "$D" "$(( $(cat "$P/port" 2>/dev/null || echo $PORT) - 379 ))"   # an instance on other ports
    mkdir -p "$P"
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$P" --daemonize no \
      --proto-max-bulk-len 2gb --client-query-buffer-limit 2gb --logfile "$P/redis.log" \
      > "$P/stdout.log" 2>&1 < /dev/null &
    echo $! > "$P/redis.pid"; echo $PORT > "$P/port"
    for _ in $(seq 1 200); do
      (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && exit 0
      kill -0 "$(cat "$P/redis.pid")" 2>/dev/null || break; sleep 0.05
    done
    echo "redis did not come up, see $P" >&2; exit 1 ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
