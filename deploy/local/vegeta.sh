#!/usr/bin/env bash
# Drives the three targets of edgebench (a fake upstream called directly, a
# plain httputil.ReverseProxy, and the whole default Switchboard system)
# with vegeta, a load generator that shares no code with edgebench, so its
# figures check edgebench's. Each round runs every target in a rotated
# order at the same closed-loop concurrency (WORKERS), streaming and not.
#
#   make vegeta                       # or: WORKERS=64 DURATION=10s ROUNDS=3 deploy/local/vegeta.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

WORKERS=${WORKERS:-64}
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
VEGETA_VERSION=v12.13.0

work=$(mktemp -d)
GOBIN="$work" go install "github.com/tsenart/vegeta/v12@$VEGETA_VERSION"
vegeta="$work/vegeta"

bin/edgebench --decider-bin bin/decider --edge-bin bin/edge --serve "$work/targets" >"$work/serve.log" 2>&1 &
serve=$!
trap 'kill -INT $serve 2>/dev/null; wait $serve 2>/dev/null; rm -rf "$work"' EXIT
until grep -q '^ready:' "$work/serve.log"; do
	if ! kill -0 "$serve" 2>/dev/null; then cat "$work/serve.log"; exit 1; fi
	sleep 0.2
done
grep -v '^ready:' "$work/serve.log"

targets=(direct proxy switchboard)
printf 'vegeta %s, %d workers, %s per run, %d rounds\n\n' "$VEGETA_VERSION" "$WORKERS" "$DURATION" "$ROUNDS"
printf '%-7s %-6s %-12s %10s %9s %9s %8s\n' round kind target 'req/s' 'p50 ms' 'p99 ms' success
for ((r = 0; r < ROUNDS; r++)); do
	for kind in plain stream; do
		for ((i = 0; i < ${#targets[@]}; i++)); do
			t=${targets[$(((i + r) % ${#targets[@]}))]}
			"$vegeta" attack -targets="$work/targets/$t-$kind.txt" -rate=0 -workers="$WORKERS" -max-workers="$WORKERS" \
				-duration="$DURATION" -keepalive=true >"$work/$t-$kind-$r.bin"
			"$vegeta" report -type=json <"$work/$t-$kind-$r.bin" >"$work/$t-$kind-$r.json"
			python3 - "$work/$t-$kind-$r.json" "$r" "$kind" "$t" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
lat = m["latencies"]
print("%-7s %-6s %-12s %10.0f %9.2f %9.2f %7.1f%%" % (sys.argv[2], sys.argv[3], sys.argv[4],
      m["throughput"], lat["50th"] / 1e6, lat["99th"] / 1e6, 100 * m["success"]))
PY
		done
	done
done
echo
echo "Switchboard / ReverseProxy requests/s, per round:"
for kind in plain stream; do
	python3 - "$work" "$kind" "$ROUNDS" <<'PY'
import json, sys
work, kind, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rs = []
for r in range(rounds):
    sb = json.load(open(f"{work}/switchboard-{kind}-{r}.json"))["throughput"]
    px = json.load(open(f"{work}/proxy-{kind}-{r}.json"))["throughput"]
    rs.append(sb / px)
print(f"  {kind:6s} " + " ".join(f"{x:.2f}x" for x in rs) + f"   (min {min(rs):.2f}x, max {max(rs):.2f}x)")
PY
done
