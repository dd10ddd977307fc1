#!/usr/bin/env bash
# Signed models against OpenSSF's model-signing 1.1.1 (scripts/setup.sh installs it in a venv of its
# own): it signs and we verify (`verify --signature`, `load --signature`, in the load's pass), we sign
# and it verifies; the key method (P-256 and P-384), the certificate method (a CA made here, a leaf
# with digitalSignature and codeSigning), shards (its Python API: its CLI has no option for them) and
# a one-file model. Then the tampering cases, each on a fresh copy, for a signature by each side: a
# flipped byte in a tensor's data, in a tensor's header, in config.json, a file added, a file
# removed, the wrong key: every verifier (ours twice, theirs) must fail, ours naming the file.
# usage: signing_interop.sh CLI   (exit 77: model-signing or openssl missing)
set -euo pipefail
cli=$1
venv=${TZ_MODEL_SIGNING_VENV:-/opt/tz-peers/model-signing-1.1.1}
ms=$venv/bin/model_signing
if ! "$venv/bin/python" -c 'import model_signing' 2> /dev/null || ! command -v openssl > /dev/null; then
  echo "signing_interop: model-signing 1.1.1 ($venv, scripts/setup.sh) or openssl missing: skipping"; exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/tz-signing-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
step() { printf 'signing_interop: %s\n' "$*"; }
fail() { step "FAIL: $*"; exit 1; }

# A model directory: weights, a config, a nested file, and git's files (never signed).
mkdir -p model/sub model/.git
"$cli" synth model/model.tensors --size-mib 8 > /dev/null
echo '{"architectures": ["Synth"]}' > model/config.json
echo '{"vocab": {}}' > model/sub/tokenizer.json
echo 'ref: refs/heads/main' > model/.git/HEAD

# Keys and certificates: P-256 and P-384 keys, another P-256 key, a CA and a leaf it signed.
for k in p256:prime256v1 p384:secp384r1 other:prime256v1; do
  openssl ecparam -name "${k#*:}" -genkey -noout 2> /dev/null | openssl pkcs8 -topk8 -nocrypt -out "${k%%:*}.key"
  openssl ec -in "${k%%:*}.key" -pubout -out "${k%%:*}.pub" 2> /dev/null
done
openssl req -x509 -new -key p384.key -subj /CN=tz-test-ca -days 2 -out ca.pem \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2> /dev/null
openssl req -new -key p256.key -subj /CN=tz-signer -out leaf.csr 2> /dev/null
printf 'keyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning\n' > leaf.ext
openssl x509 -req -in leaf.csr -CA ca.pem -CAkey p384.key -CAcreateserial -days 1 -extfile leaf.ext -out leaf.pem 2> /dev/null

flip() { python3 -c 'import sys; f=open(sys.argv[1],"r+b"); f.seek(int(sys.argv[2])); b=f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0]^1]))' "$@"; }
expect_failure() {  # what NAME_IN_ERROR command...
  local what=$1 name=$2 out
  shift 2
  if out=$("$@" 2>&1); then fail "$what: accepted"; fi
  [[ -z $name || $out == *"$name"* ]] || fail "$what: the error does not name '$name': $out"
  step "$what: refused: $(tail -1 <<< "$out" | cut -c1-160)"
}
ours_verify() { "$cli" verify --signature "$1" "${@:3}" "$2"; }
ours_load() { "$cli" load --signature "$1" "${@:3}" "$2/model.tensors" > /dev/null; }
ms_sharded() {  # ms_sharded sign|verify MODEL SIG KEY
  "$venv/bin/python" - "$@" << 'PY'
import sys, model_signing
what, model, sig, key = sys.argv[1:]
if what == "sign":
    model_signing.signing.Config().use_elliptic_key_signer(private_key=key).set_hashing_config(
        model_signing.hashing.Config().use_shard_serialization(shard_size=3_000_000)).sign(model, sig)
else:
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=key).verify(model, sig)
PY
}

step "theirs signs, ours verifies: key P-256, key P-384, certificate, shards, one file"
"$ms" sign key model --private_key p256.key --signature ms-p256.sig > /dev/null
"$ms" sign key model --private_key p384.key --signature ms-p384.sig > /dev/null
"$ms" sign certificate model --private_key p256.key --signing_certificate leaf.pem --certificate_chain ca.pem \
  --signature ms-cert.sig > /dev/null
ms_sharded sign model ms-shards.sig p256.key
"$ms" sign key model/model.tensors --private_key p256.key --signature ms-file.sig > /dev/null
ours_verify ms-p256.sig model --public-key p256.pub
ours_load ms-p256.sig model --public-key p256.pub
"$cli" load --signature ms-p256.sig --public-key p256.pub model/model.tensors | grep -q "signature: every file" \
  || fail "load --signature did not say the signature was checked"
ours_verify ms-p384.sig model --public-key p384.pub
ours_load ms-p384.sig model --public-key p384.pub
ours_verify ms-cert.sig model --certificate-chain ca.pem
ours_load ms-cert.sig model --certificate-chain ca.pem
ours_verify ms-shards.sig model --public-key p256.pub | grep -q "(shards)" || fail "the sharded signature was not read as shards"
ours_load ms-shards.sig model --public-key p256.pub
ours_verify ms-file.sig model/model.tensors --public-key p256.pub
"$cli" load --signature ms-file.sig --public-key p256.pub model/model.tensors > /dev/null

step "a sharded safetensors checkpoint (3 shard files, an index, a config): every shard hashed in the load"
"$cli" convert model/model.tensors ckpt/ --max-shard-size 3MB > /dev/null
cp model/config.json ckpt/
"$ms" sign key ckpt --private_key p256.key --signature ms-ckpt.sig > /dev/null
ms_sharded sign ckpt ms-ckpt-shards.sig p256.key
"$cli" load --signature ms-ckpt.sig --public-key p256.pub ckpt > /dev/null
"$cli" load --signature ms-ckpt-shards.sig --public-key p256.pub ckpt/model.safetensors.index.json > /dev/null
cp -r ckpt ckpt-changed
flip ckpt-changed/model-00002-of-00003.safetensors 100000
expect_failure "checkpoint, a shard changed: ours load" "model-00002-of-00003.safetensors" \
  "$cli" load --signature ms-ckpt.sig --public-key p256.pub ckpt-changed
expect_failure "checkpoint, a shard changed: ours load (shards)" "model-00002-of-00003.safetensors:0:" \
  "$cli" load --signature ms-ckpt-shards.sig --public-key p256.pub ckpt-changed

step "ours signs, theirs verifies: key P-256, key P-384, certificate, shards, one file"
"$cli" sign --private-key p256.key --signature tz-p256.sig model > /dev/null
"$cli" sign --private-key p384.key --signature tz-p384.sig model > /dev/null
"$cli" sign --private-key p256.key --signing-certificate leaf.pem --certificate-chain ca.pem --signature tz-cert.sig model > /dev/null
"$cli" sign --private-key p256.key --shards --shard-size 3000000 --signature tz-shards.sig model > /dev/null
"$cli" sign --private-key p256.key --signature tz-file.sig model/model.tensors > /dev/null
"$ms" verify key model --public_key p256.pub --signature tz-p256.sig > /dev/null
"$ms" verify key model --public_key p384.pub --signature tz-p384.sig > /dev/null
"$ms" verify certificate model --certificate_chain ca.pem --signature tz-cert.sig > /dev/null
ms_sharded verify model tz-shards.sig p256.pub
"$ms" verify key model/model.tensors --public_key p256.pub --signature tz-file.sig > /dev/null
ours_load tz-cert.sig model --certificate-chain ca.pem

# Each case: a fresh copy changed by $2 (a function), then every verifier must fail.
header_offset=$("$cli" inspect --json model/model.tensors | python3 -c \
  'import json,sys; t=json.load(sys.stdin)["tensors"]; print(t[len(t)//2]["header_offset"])')
data_offset=$("$cli" inspect --json model/model.tensors | python3 -c \
  'import json,sys; t=json.load(sys.stdin)["tensors"]; print(t[len(t)//2]["data_offset"] + 17)')
tamper_data() { flip m/model.tensors "$data_offset"; }
tamper_header() { flip m/model.tensors "$((header_offset + 12))"; }
tamper_config() { echo '{"architectures": ["Other"]}' > m/config.json; }
tamper_add() { echo extra > m/extra.txt; }
tamper_remove() { rm m/config.json; }
tamper_key() { :; }  # the model is intact; the verifiers get another key
for signer in ms tz; do
  for case in data:model.tensors header:model.tensors config:config.json add:extra.txt remove:config.json key:; do
    rm -rf m && cp -r model m && "tamper_${case%%:*}"
    key=p256.pub
    [[ ${case%%:*} == key ]] && key=other.pub
    expect_failure "$signer/${case%%:*}: ours verify" "${case#*:}" ours_verify "$signer-p256.sig" m --public-key "$key"
    if [[ ${case%%:*} != remove || -e m/model.tensors ]]; then
      expect_failure "$signer/${case%%:*}: ours load" "${case#*:}" ours_load "$signer-p256.sig" m --public-key "$key"
    fi
    expect_failure "$signer/${case%%:*}: model_signing verify" "" "$ms" verify key m --public_key "$key" --signature "$signer-p256.sig"
  done
done
step "tampering: data, header, config.json, a file added, a file removed, the wrong key: all fail in both, for both signers"

step "keyless Sigstore bundles are refused with a clear message"
python3 - ms-p256.sig keyless.sig << 'PY'
import json, sys
b = json.load(open(sys.argv[1]))
b["verificationMaterial"] = {"certificate": {"rawBytes": "AAAA"}, "tlogEntries": [{"logIndex": "1"}]}
json.dump(b, open(sys.argv[2], "w"))
PY
expect_failure "keyless" "keyless Sigstore signature" ours_verify keyless.sig model --public-key p256.pub
step "OK"
