#!/usr/bin/env bash
# shards.sh [test binary flags...]: runs the tests module's tests in SHARDS
# processes at once (default 4), each a share of the test names dealt out
# in turn. The test binary is built once, with the race detector.
#
# The tests spend most of their time waiting on the systems they start
# (elections, session TTLs, retry-after, timeouts), little on the CPU, so
# shards cut the wall time nearly by their number. Each test still runs
# alone in its process, as it does under a plain go test. Each shard's
# output is printed when all have ended; the exit status is non-zero if any
# shard failed.
set -euo pipefail
cd "$(dirname "$0")"
shards=${SHARDS:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -race -c -o "$work/tests.test" .
mapfile -t names < <("$work/tests.test" -test.list '^Test' | grep '^Test')
pids=()
for ((i = 0; i < shards; i++)); do
	run=""
	for ((j = i; j < ${#names[@]}; j += shards)); do
		run+="${run:+|}${names[j]}"
	done
	[ -n "$run" ] || continue
	"$work/tests.test" -test.count=1 -test.timeout=30m -test.run "^($run)\$" "$@" >"$work/shard$i.out" 2>&1 &
	pids+=("$!:$i")
done
failed=0
for p in "${pids[@]}"; do
	if ! wait "${p%%:*}"; then
		failed=1
		echo "shard ${p##*:} FAILED" >>"$work/status"
	fi
done
for p in "${pids[@]}"; do
	i=${p##*:}
	echo "=== shard $i of $shards"
	cat "$work/shard$i.out"
done
if [ "$failed" -ne 0 ]; then
	cat "$work/status"
	exit 1
fi
echo "ok: ${#names[@]} tests in $shards shards"
