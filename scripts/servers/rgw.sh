#!/usr/bin/env bash
# Throw-away single-node Ceph (1 mon + 1 OSD on a sparse BlueStore file, no mgr) + radosgw on loopback,
# for S3 tests: S3 over HTTP on PORT_BASE+480, mon on PORT_BASE+481, S3 over HTTPS on PORT_BASE+482
# (certificate from ca.sh). User key TESTKEY / TESTSECRET (override: S3_ACCESS_KEY / S3_SECRET_KEY),
# bucket "tz-test" created. Takes ~15 s to start.
# usage: rgw.sh start|stop|status DIR [PORT_BASE=18000]. start is idempotent; exit 77 when the Ceph
# binaries are not installed. PID files: DIR/rgw/run/{mon,osd,rgw}.pid, logs: DIR/rgw/log/.
set -euo pipefail
cmd=${1:?usage: rgw.sh start|stop|status DIR [PORT_BASE]}; TOP=$(realpath -m "${2:?dir}"); BASE=${3:-18000}
D=$TOP/rgw; PORT=$((BASE + 480)); MONPORT=$((BASE + 481)); TLSPORT=$((BASE + 482))
AK=${S3_ACCESS_KEY:-TESTKEY}; SK=${S3_SECRET_KEY:-TESTSECRET}
pid_of() { cat "$D/run/$1.pid" 2>/dev/null || true; }
alive() { local p; p=$(pid_of rgw); [[ -n $p ]] && kill -0 "$p" 2>/dev/null; }
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }
wait_gone() { for p in "$@"; do for _ in $(seq 1 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.25; done; done; }
stop() {
  local rgw osd mon; rgw=$(pid_of rgw); osd=$(pid_of osd); mon=$(pid_of mon)
  if [[ -n $rgw ]]; then kill "$rgw" 2>/dev/null || true; wait_gone "$rgw"; kill -9 "$rgw" 2>/dev/null || true; fi
  # A TERMed OSD waits ~5 s for the mon: the data is throw-away, so KILL osd and mon.
  for p in $osd $mon; do kill -9 "$p" 2>/dev/null || true; done
  wait_gone $osd $mon
  rm -f "$D"/run/*.pid
}
case $cmd in
  status) alive && answers && echo "radosgw up on 127.0.0.1:$PORT" || { echo "radosgw down"; exit 1; } ;;
  stop) stop; rm -rf "$D" ;;
  start)
    for b in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph curl; do
      command -v $b >/dev/null || { echo "$b not installed" >&2; exit 77; }
    done
    alive && answers && exit 0
    [[ -d $D ]] && stop
    "$(dirname "$0")/ca.sh" "$TOP"
    rm -rf "$D"; mkdir -p "$D"/{run,log,mon.a,osd.0,rgw.a}
    FSID=$(cat /proc/sys/kernel/random/uuid)
    FRONT="beast endpoint=127.0.0.1:$PORT ssl_endpoint=127.0.0.1:$TLSPORT ssl_certificate=$TOP/ca/server.pem ssl_private_key=$TOP/ca/server.key"
    cat > "$D/ceph.conf" <<CONF
[global]
fsid = $FSID
mon host = v2:127.0.0.1:$MONPORT
mon initial members = a
public network = 127.0.0.0/8
auth cluster required = none
auth service required = none
auth client required = none
ms bind ipv6 = false
ms mon client mode = crc
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
osd crush chooseleaf type = 0
osd objectstore = bluestore
bluestore block create = true
bluestore block size = 21474836480
bluestore fsck on mkfs = false
osd memory target = 1073741824
bluestore cache autotune = false
bluestore cache size = 268435456
run dir = $D/run
admin socket = $D/run/\$name.asok
log file = $D/log/\$name.log
keyring = $D/keyring
[mon.a]
mon data = $D/mon.a
[osd.0]
osd data = $D/osd.0
[client.rgw.a]
rgw frontends = $FRONT
rgw data = $D/rgw.a
rgw dns name = localhost
CONF
    C=(-c "$D/ceph.conf")
    monmaptool --create --addv a "[v2:127.0.0.1:$MONPORT]" --fsid "$FSID" "$D/monmap" > /dev/null
    ceph-mon "${C[@]}" --mkfs -i a --monmap "$D/monmap" > "$D/log/mon-mkfs.stdout" 2>&1
    ceph-mon "${C[@]}" -i a -f > "$D/log/mon.stdout" 2>&1 < /dev/null & echo $! > "$D/run/mon.pid"
    timeout 60 ceph "${C[@]}" osd create > /dev/null
    ceph-osd "${C[@]}" -i 0 --mkfs > "$D/log/osd-mkfs.stdout" 2>&1
    ceph-osd "${C[@]}" -i 0 -f > "$D/log/osd.stdout" 2>&1 < /dev/null & echo $! > "$D/run/osd.pid"
    for _ in $(seq 1 120); do timeout 10 ceph "${C[@]}" osd stat 2>/dev/null | grep -q '1 up' && break; sleep 0.25; done
    radosgw "${C[@]}" -n client.rgw.a -f > "$D/log/rgw.stdout" 2>&1 < /dev/null & echo $! > "$D/run/rgw.pid"
    for _ in $(seq 1 240); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.25; done
    curl -s -o /dev/null "http://127.0.0.1:$PORT/" || { echo "radosgw did not come up, see $D/log" >&2; stop; exit 1; }
    timeout 60 radosgw-admin "${C[@]}" user create --uid=test --display-name=test \
      --access-key="$AK" --secret-key="$SK" > "$D/log/user.stdout" 2>&1
    for _ in $(seq 1 20); do
      code=$(curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AK:$SK" \
        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X PUT "http://127.0.0.1:$PORT/tz-test")
      [[ $code == 200 || $code == 409 ]] && exit 0
      sleep 0.5
    done
    echo "could not create bucket tz-test (HTTP $code), see $D/log" >&2; exit 1 ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
