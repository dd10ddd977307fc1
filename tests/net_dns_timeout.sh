#!/usr/bin/env bash
# A DNS server that never answers: http://, s3:// and redis:// loads of a name must fail with a
# timeout error naming the lookup, within the give-up limit (not after glibc's own retries).
# Runs the CLI in a private mount namespace whose /etc/resolv.conf names a silent UDP server on
# a loopback address's port 53 (started here). Needs root and unshare; exits 77 (skipped) without them.
# usage: net_dns_timeout.sh TENSORIZER_CLI
set -uo pipefail
cli=${1:?usage: net_dns_timeout.sh TENSORIZER_CLI}
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (a port-53 server and a mount namespace)"; exit 77; }
command -v unshare >/dev/null || { echo "skipped: unshare not found"; exit 77; }
unshare -m true 2>/dev/null || { echo "skipped: cannot create a mount namespace here"; exit 77; }
work=$(mktemp -d)
ns=127.0.53.$((RANDOM % 250 + 2))  # a loopback address of its own: parallel runs do not collide
trap 'kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
python3 - "$ns" >"$work/server.log" 2>&1 <<'PY' &
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 53))
print("listening", flush=True)
while True:
    s.recvfrom(4096)  # read every query, answer none
PY
server=$!
for _ in $(seq 50); do grep -q listening "$work/server.log" && break; sleep 0.1; done
grep -q listening "$work/server.log" || { echo "skipped: cannot serve on $ns:53: $(cat "$work/server.log")"; exit 77; }
# glibc alone would wait 30 s x 3 attempts per lookup with these options.
printf 'nameserver %s\noptions timeout:30 attempts:3\n' "$ns" >"$work/resolv.conf"

failed=0
for uri in http://silent-dns.test:1/m.tensors s3://bucket/m.tensors redis://silent-dns.test:1/m; do
  out=$(unshare -m sh -c 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"' sh "$work/resolv.conf" \
    timeout 60 "$cli" load --connect-timeout 1 --give-up-after 3 --s3-endpoint http://silent-dns.test:1 "$uri" 2>&1)
  rc=$?
  seconds=$(printf '%s\n' "$out" | sed -n 's/.*failed after [0-9]* attempts\{0,1\} in \([0-9.]*\) s.*/\1/p')
  echo "$uri: exit $rc after ${seconds:-?} s: $out"
  if [ "$rc" = 124 ]; then echo "FAIL $uri: no answer within 60 s"; failed=1; continue; fi
  case $out in *"error (timeout)"*"resolving silent-dns.test"*) ;; *) echo "FAIL $uri: not a timeout naming the lookup"; failed=1 ;; esac
  # The give-up limit is 3 s; allow scheduling slack on a shared machine, far below glibc's 90 s.
  if [ -z "$seconds" ] || awk -v s="$seconds" 'BEGIN { exit !(s > 15) }'; then echo "FAIL $uri: took ${seconds:-?} s"; failed=1; fi
done
exit $failed
