#!/usr/bin/env bash
# Creates (once) a throw-away test CA and a server certificate for localhost/127.0.0.1 signed by it.
# usage: ca.sh DIR   -> DIR/ca/{ca.pem,ca.key,server.pem,server.key}; prints nothing, idempotent.
set -euo pipefail
D=$(realpath -m "${1:?usage: ca.sh DIR}")/ca
command -v openssl >/dev/null || { echo "openssl not found" >&2; exit 77; }
[[ -s $D/server.pem && -s $D/server.key && -s $D/ca.pem ]] && exit 0
mkdir -p "$D"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$D/ca.key" -out "$D/ca.pem" -days 30 \
  -subj "/CN=tensorizer test CA" -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$D/server.key" -out "$D/server.csr" -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$D/ext.cnf"
openssl x509 -req -in "$D/server.csr" -CA "$D/ca.pem" -CAkey "$D/ca.key" -CAcreateserial -days 30 \
  -extfile "$D/ext.cnf" -out "$D/server.pem" 2>/dev/null
chmod 644 "$D"/*.pem "$D"/*.key   # nginx workers (nobody) read them after dropping privileges
