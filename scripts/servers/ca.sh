#!/usr/bin/env bash
# Creates (once) a throw-away test CA and a server certificate for localhost/127.0.0.1 signed by it.
# usage: ca.sh DIR   -> DIR/ca/{ca.pem,ca.key,server.pem,server.key}; prints nothing, idempotent.
# Safe to run concurrently (the nginx and RGW fixtures start in parallel): one run creates the
# files under a lock in a temporary directory and renames it into place, the others wait and reuse it.
set -euo pipefail
TOP=$(realpath -m "${1:?usage: ca.sh DIR}")
D=$TOP/ca
command -v openssl >/dev/null || { echo "openssl not found" >&2; exit 77; }
mkdir -p "$TOP"
exec 9>"$TOP/.ca.lock"
flock 9
[[ -s $D/server.pem && -s $D/server.key && -s $D/ca.pem ]] && exit 0
T=$(mktemp -d "$TOP/.ca.XXXXXX")
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/ca.key" -out "$T/ca.pem" -days 30 \
  -subj "/CN=tensorizer test CA" -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$T/server.key" -out "$T/server.csr" -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$T/ext.cnf"
openssl x509 -req -in "$T/server.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" -CAcreateserial -days 30 \
  -extfile "$T/ext.cnf" -out "$T/server.pem" 2>/dev/null
chmod 755 "$T"
chmod 644 "$T"/*.pem "$T"/*.key   # nginx workers (nobody) read them after dropping privileges
rm -rf "$D"
mv "$T" "$D"
