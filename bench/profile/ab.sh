#!/bin/bash
# A/B of two builds of the all-in-one guard on the small GET, interleaved:
#   bench/profile/ab.sh <root A> <root B> [rounds, default 4]
# Each root is a checkout with `dist/` built (npm run build) and node_modules. Rounds
# alternate A, B, B, A, ...; each run starts that build's guard alone on a fresh data
# dir (an agent with log_outputs: hash and a bearer credential, as
# bench/profile/run.sh sets up, on one upstream for all runs), warms it up for 2 s,
# loads it with `wrk -t1 -c64` for DUR seconds (default 5), then waits SETTLE
# seconds (default 3) for the audit batches of the run to be written, and reports
# req/s and the CPU µs per request of the guard's whole process over the load and the
# settling (every thread, chDB's included, from /proc/<pid>/stat), then the same by
# thread: main (the event loop), node (V8's and libuv's helpers, where chDB's
# inserts run), chDB's pools by name. Medians at the end.
# EXTRA_ENV="NAME=value ..." adds settings to both; URL_PATH=/64k loads another of the upstream's paths. Loopback only.
set -e
if [ $# -lt 2 ] || [ ! -f "$1/dist/server/main.js" ] || [ ! -f "$2/dist/server/main.js" ]; then
  echo "usage: $0 <root A> <root B> [rounds]  (each root a checkout with dist/ built)" >&2; exit 2
fi
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd); ROUNDS=${3:-4}; DUR=${DUR:-5}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
HZ=$(getconf CLK_TCK)
W=$(mktemp -d /tmp/ab.XXXXXX)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
node "$HERE/dist/bench/upstream.js" > "$W/up.log" 2>&1 &
for i in $(seq 1 50); do grep -q 'port=' "$W/up.log" && break; sleep 0.1; done
UPORT=$(grep -o 'port=[0-9]*' "$W/up.log" | cut -d= -f2)
start() { # name root port
  mkdir -p "$W/$1"
  (cd "$2" && exec env DATA_DIR="$W/$1" $EXTRA_ENV PORT=$3 HOST=127.0.0.1 GUARD_ALLOW_TARGETS=127.0.0.1 \
    NODE_EXTRA_CA_CERTS="$HERE/test/fixtures/tls/ca.crt" LOG_LEVEL=warn node dist/server/main.js) > "$W/$1.log" 2>&1 &
  echo $! > "$W/$1.pid"
  for i in $(seq 1 100); do curl -s "localhost:$3/health" > /dev/null && break; sleep 0.2; done
  local token key
  token=$(curl -s -XPOST "localhost:$3/auth/signup" -H 'content-type: application/json' -d '{"email":"ab@example.com","password":"correct horse battery"}' | node -pe 'JSON.parse(require("fs").readFileSync(0)).access_token')
  key=$(curl -s -XPOST "localhost:$3/agents" -H "authorization: Bearer $token" -H 'content-type: application/json' -d '{"name":"ab","log_outputs":"hash"}' | node -pe 'JSON.parse(require("fs").readFileSync(0)).api_key')
  curl -s -XPOST "localhost:$3/credentials" -H "authorization: Bearer $token" -H 'content-type: application/json' -d "{\"name\":\"t\",\"hostname\":\"127.0.0.1:$UPORT\",\"cred_type\":\"bearer\",\"value\":\"secret-token\"}" > /dev/null
  echo "http://127.0.0.1:$3/proxy/$key/127.0.0.1:$UPORT${URL_PATH:-/small}" > "$W/$1.url"
  wrk -t1 -c64 -d2s "$(cat "$W/$1.url")" > /dev/null
}
# CPU ticks of each thread group of a process: "name ticks" lines, sorted by name.
threads() {
  for t in /proc/$1/task/*; do
    local tid=${t##*/} stat comm
    stat=$(cat "$t/stat" 2>/dev/null) || continue
    comm=${stat#*(}; comm=${comm%)*}; comm=${comm%%[0-9]*}; comm=${comm// /_}
    [ "$tid" = "$1" ] && comm=main
    echo "$comm ${stat##*) }"
  done | awk '{a[$1] += $13 + $14} END {for (k in a) print k, a[k]}' | sort
}
run() { # name
  local pid url out n root
  if [ "$1" = A ]; then root=$A; else root=$B; fi
  rm -rf "$W/$1"; start "$1" "$root" 18101
  pid=$(cat "$W/$1.pid"); url=$(cat "$W/$1.url")
  sleep 1
  threads "$pid" > "$W/th0"
  out=$(wrk -t1 -c64 -d${DUR}s "$url")
  sleep "${SETTLE:-3}"
  threads "$pid" > "$W/th1"
  kill -TERM "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  n=$(echo "$out" | awk '/requests in/ {print $1}')
  echo "$1 $(echo "$out" | awk '/Requests\/sec/ {print $2}') $(join -a2 -e0 -o 0,1.2,2.2 "$W/th0" "$W/th1" | awk -v n="$n" -v hz="$HZ" '
    {d = ($3 - $2) * 1e6 / hz / n; all += d; if (d >= 0.05) by = by sprintf(" %s=%.1f", $1, d)} END {printf "%.1f%s", all, by}')" | tee -a "$W/results"
}
echo "build req/s cpu_us_per_req by_thread_group"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then run A; run B; else run B; run A; fi
done
node -e '
const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map((l) => l.split(" "));
const med = (xs) => { xs = xs.slice().sort((a, b) => a - b); const m = xs.length >> 1; return xs.length % 2 ? xs[m] : (xs[m - 1] + xs[m]) / 2; };
for (const b of ["A", "B"]) {
  const r = rows.filter((x) => x[0] === b);
  const groups = {};
  for (const x of r) for (const kv of x.slice(3)) { const [k, v] = kv.split("="); (groups[k] ??= []).push(+v); }
  const by = Object.entries(groups).map(([k, v]) => `${k} ${med(v.concat(Array(r.length - v.length).fill(0))).toFixed(1)}`).join(", ");
  console.log(`${b} median: ${med(r.map((x) => +x[1])).toFixed(0)} req/s, ${med(r.map((x) => +x[2])).toFixed(1)} us/req (${r.length} runs); by thread: ${by}`);
}' "$W/results"
