#!/usr/bin/env bash
# Records the "mixed" HTTP traffic the replay benchmarks of docs/performance-history.md use ("User
# space per call II"): nginx (1 worker) answering four kinds of request, loaded by
# `wrk -t1 -c32 -s mixed.lua` for 8 s while `ebtop -w` records. Run as root, by hand:
#   bench/mixed/record.sh [EBTOP_BINARY] [OUT.rec]
# Then: bench/replay_ab.py OLD NEW OUT.rec --rounds 21, bench/replay_threads.py BIN OUT.rec.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ebtop="${1:-$here/../../$("$here/../../scripts/build-release")}"
out="${2:-$PWD/mixed.rec}"
port=18080
dir="$(mktemp -d /tmp/ebtop-mixed.XXXXXX)"
trap 'kill "$(cat "$dir/nginx.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$dir"' EXIT
cat >"$dir/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $dir/nginx.pid; error_log $dir/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  server {
    listen 127.0.0.1:$port;
    location /api/users/ { return 200 '{"id":1,"name":"someone","email":"a@example.com"}'; }
    location /static/ { return 200 "console.log('app');\n"; }
    location /api/orders { return 201 '{"ok":true}'; }
    location /healthz { return 200 "ok"; }
  }
}
CONF
nginx -c "$dir/nginx.conf" -p "$dir" &
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
"$ebtop" -w "$out" --port "$port" --duration 12s &
recorder=$!
sleep 2
wrk -t1 -c32 -d8s -s "$here/mixed.lua" "http://127.0.0.1:$port/" | tail -3
wait "$recorder"
ls -l "$out"
