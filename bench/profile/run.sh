#!/bin/bash
# Profiles the all-in-one guard (dist/, run `npm run build` first) on a small GET
# under wrk (64 connections, DUR seconds, default 8): a CPU profile of the main
# thread in /tmp/prof, then `node bench/profile/summarize.mjs /tmp/prof/CPU*.cpuprofile <requests>`.
# EXTRA_ENV="NAME=value ..." adds settings; URL_PATH=/64k profiles another of the upstream's paths, WRK_ARGS="-s post.lua" another method. STRACE=1 counts system calls instead (strace -c over 3 s). Loopback only.
set -e
PROF_FLAGS="--cpu-prof --cpu-prof-dir=/tmp/prof"
[ -n "$STRACE" ] && PROF_FLAGS=""
cd /work/main
rm -rf /tmp/prof/* /tmp/profdata; mkdir -p /tmp/prof /tmp/profdata
node dist/bench/upstream.js > /tmp/prof/up.log 2>&1 & UP=$!
sleep 1; UPORT=$(grep -o 'port=[0-9]*' /tmp/prof/up.log | cut -d= -f2)
env DATA_DIR=/tmp/profdata $EXTRA_ENV PORT=18099 HOST=127.0.0.1 GUARD_ALLOW_TARGETS=127.0.0.1 NODE_EXTRA_CA_CERTS=$PWD/test/fixtures/tls/ca.crt LOG_LEVEL=warn node $PROF_FLAGS $NODE_FLAGS dist/server/main.js > /tmp/prof/guard.log 2>&1 & G=$!
for i in $(seq 1 50); do curl -s localhost:18099/health > /dev/null && break; sleep 0.2; done
TOKEN=$(curl -s -XPOST localhost:18099/auth/signup -H 'content-type: application/json' -d '{"email":"p@example.com","password":"correct horse battery"}' | node -pe 'JSON.parse(require("fs").readFileSync(0)).access_token')
KEY=$(curl -s -XPOST localhost:18099/agents -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{"name":"p","log_outputs":"hash"}' | node -pe 'JSON.parse(require("fs").readFileSync(0)).api_key')
curl -s -XPOST localhost:18099/credentials -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' -d "{\"name\":\"t\",\"hostname\":\"127.0.0.1:$UPORT\",\"cred_type\":\"bearer\",\"value\":\"secret-token\"}" > /dev/null
curl -s "localhost:18099/proxy/$KEY/127.0.0.1:$UPORT${URL_PATH:-/small}" > /dev/null
if [ -n "$STRACE" ]; then
  wrk $WRK_ARGS -t1 -c64 -d2s "http://127.0.0.1:18099/proxy/$KEY/127.0.0.1:$UPORT${URL_PATH:-/small}" > /dev/null
  timeout 6 strace ${STRACE_ARGS:--c} -p $G -o /tmp/prof/strace.txt & S=$!
  sleep 1
  wrk $WRK_ARGS -t1 -c64 -d3s "http://127.0.0.1:18099/proxy/$KEY/127.0.0.1:$UPORT${URL_PATH:-/small}" | grep -E "requests in"
  wait $S || true
  head -12 /tmp/prof/strace.txt
else
  wrk $WRK_ARGS -t1 -c64 -d${DUR:-8}s "http://127.0.0.1:18099/proxy/$KEY/127.0.0.1:$UPORT${URL_PATH:-/small}" | grep -E "requests in|Requests/sec|Latency"
fi
ps -o pid,%cpu,rss,nlwp -p $G
kill -TERM $G; wait $G || true; kill $UP
