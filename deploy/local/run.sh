#!/usr/bin/env bash
# Runs the whole system on loopback: four simulated providers, a decider with
# embedded etcd, and an edge. Ctrl-C (or SIGTERM) stops everything and exits
# 0; a component that exits by itself is an error (exit 1). Used by `make run`.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${SWITCHBOARD_BIN:-bin}
DATA=${SWITCHBOARD_DATA:-.data}
EDGE_ADDR=${EDGE_ADDR:-127.0.0.1:8080}
DECIDER_ADDR=${DECIDER_ADDR:-127.0.0.1:9090}
# Each binary's admin listener: Prometheus metrics at /metrics, health at
# /healthz and /readyz, and on the decider the dashboard at /dashboard/.
# (EDGE_DEBUG_ADDR and DECIDER_DEBUG_ADDR are their former names.)
DECIDER_ADMIN_ADDR=${DECIDER_ADMIN_ADDR:-${DECIDER_DEBUG_ADDR:-127.0.0.1:9190}}
EDGE_ADMIN_ADDR=${EDGE_ADMIN_ADDR:-${EDGE_DEBUG_ADDR:-127.0.0.1:9191}}
mkdir -p "$DATA"

# A fresh demo key each run; only its SHA-256 goes into the catalog.
KEY=${SWITCHBOARD_DEMO_KEY:-sk-sb-demo-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
SHA=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
# Fresh decider tokens each run, for the edge, for a service of the demo
# tenant (gRPC examples) and for an operator (bin/switchboard finds it here);
# only their SHA-256 goes into the catalog.
token() { # file: writes a new random token into it and prints its SHA-256
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$1")
  sha256sum <"$1" | cut -d' ' -f1
}
EDGE_SHA=$(token "$DATA/edge-token")
SERVICE_SHA=$(token "$DATA/service-token")
OPERATOR_SHA=$(token "$DATA/operator-token")
sed -e "s/@DEMO_KEY_SHA256@/$SHA/" -e "s/@EDGE_TOKEN_SHA256@/$EDGE_SHA/" -e "s/@SERVICE_TOKEN_SHA256@/$SERVICE_SHA/" -e "s/@OPERATOR_TOKEN_SHA256@/$OPERATOR_SHA/" \
  deploy/local/catalog.yaml > "$DATA/catalog.yaml"

# The simulated providers accept any credential; real ones read these.
export SWITCHBOARD_PROVIDER_KEY_ALPHA=sim-alpha SWITCHBOARD_PROVIDER_KEY_BETA=sim-beta SWITCHBOARD_PROVIDER_KEY_GAMMA=sim-gamma SWITCHBOARD_PROVIDER_KEY_DELTA=sim-delta

pids=()
# stop sends every component SIGTERM (each treats it, as SIGINT, as a clean
# stop) and waits until all have exited: none outlives the script. Ctrl-C
# reaches the components too (they share the terminal's process group);
# SIGTERM covers a signal sent to the script alone.
stop() {
  trap - INT TERM EXIT
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
# A stop asked for is not an error: exit 0, whatever the components' own
# statuses on the way down.
stopped() {
  stop
  echo "Switchboard stopped." >&2
  exit 0
}
trap stopped INT TERM
# Any other way out (a start that failed) stops what was started.
trap stop EXIT

wait_http() { # url
  for _ in $(seq 1 300); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "not ready: $1" >&2; return 1
}

"$BIN/provsim" --config services/provsim/demo.yaml 2>"$DATA/provsim.log" & pids+=($!)
# Probes every 30s (default 5m) so the demo learns per-size speeds quickly.
"$BIN/decider" --listen "$DECIDER_ADDR" --catalog "$DATA/catalog.yaml" --data-dir "$DATA" --etcd-listen 127.0.0.1:0 --drain-delay 0s --probe-interval 30s \
  --admin-listen "$DECIDER_ADMIN_ADDR" 2>"$DATA/decider.log" & pids+=($!)
"$BIN/edge" --listen "$EDGE_ADDR" --decider "$DECIDER_ADDR" --decider-token-file "$DATA/edge-token" \
  --admin-listen "$EDGE_ADMIN_ADDR" 2>"$DATA/edge.log" & pids+=($!)

wait_http http://127.0.0.1:9101/healthz
# Ready: the edge reaches the decider and the decider serves its catalog.
wait_http "http://$EDGE_ADDR/readyz"

cat <<MSG

Switchboard is running (logs in $DATA/*.log). Ctrl-C stops it.

  API key:  $KEY
  Base URL: http://$EDGE_ADDR/v1   (the edge; readiness http://$EDGE_ADDR/readyz)
  Decider:  $DECIDER_ADDR (gRPC; tokens: service $DATA/service-token, operator $DATA/operator-token)
  Dashboard: http://$DECIDER_ADMIN_ADDR/dashboard/   (sign in with the API key, or as operator with $DATA/operator-token)
  Metrics:  http://$EDGE_ADMIN_ADDR/metrics (edge), http://$DECIDER_ADMIN_ADDR/metrics (decider)
  Providers (simulated): http://127.0.0.1:9101/v1 … 9104

Try:
  curl -s http://$EDGE_ADDR/v1/chat/completions \\
    -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \\
    -d '{"model":"deepseek/deepseek-v4.1-flash","messages":[{"role":"user","content":"Hello there"}]}'

  OPENAI_BASE_URL=http://$EDGE_ADDR/v1 OPENAI_API_KEY=$KEY <your OpenAI SDK program>

  ANTHROPIC_BASE_URL=http://$EDGE_ADDR ANTHROPIC_AUTH_TOKEN=$KEY claude   # its claude-* names are aliases here

  $BIN/switchboard stats --decider $DECIDER_ADDR --token-file $DATA/operator-token
  $BIN/switchboard explain deepseek/deepseek-v4.1-flash --tenant demo --decider $DECIDER_ADDR --token-file $DATA/operator-token
MSG
# Returns when a component exits by itself, or at once on Ctrl-C/SIGTERM,
# whose trap (stopped) then runs and exits 0 before the lines below.
status=0
wait -n "${pids[@]}" || status=$?
echo "a component exited unasked (status $status); see $DATA/*.log" >&2
exit 1
