#!/usr/bin/env bash
# shards.sh [test binary flags...]: runs the tests module's tests in SHARDS
# processes at once (default 4, as make test), each a share of the test names. The shares
# are dealt by the time each test takes (shards.weights: the longest first,
# each to the shard with the least time so far), so that the shards end
# together. The test binary is built once, with the race detector.
#
# The tests spend most of their time waiting on the systems they start
# (elections, session TTLs, retry-after, timeouts), little on the CPU, so
# shards cut the wall time nearly by their number. Each test still runs
# alone in its process, as it does under a plain go test. Each shard's
# output is printed when all have ended, after the seconds it took; the exit
# status is non-zero if any shard failed.
set -euo pipefail
cd "$(dirname "$0")"
shards=${SHARDS:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -race -c -o "$work/tests.test" .
mapfile -t names < <("$work/tests.test" -test.list '^Test' | grep '^Test')
# "shard name" lines: the tests by weight, the heaviest first, each to the
# shard with the least weight so far.
mapfile -t dealt < <(printf '%s\n' "${names[@]}" |
	awk 'NR == FNR { if ($0 !~ /^#/) w[$2] = $1; next } { print ($1 in w ? w[$1] : 3), $1 }' shards.weights - |
	sort -k1,1nr -k2,2 |
	awk -v n="$shards" '{ b = 0; for (i = 1; i < n; i++) if (load[i] < load[b]) b = i; load[b] += $1; print b, $2 }')
pids=()
for ((i = 0; i < shards; i++)); do
	run=""
	for d in "${dealt[@]}"; do
		[ "${d%% *}" = "$i" ] && run+="${run:+|}${d#* }"
	done
	[ -n "$run" ] || continue
	(
		start=$SECONDS
		rc=0
		"$work/tests.test" -test.count=1 -test.timeout=30m -test.run "^($run)\$" "$@" >"$work/shard$i.out" 2>&1 || rc=$?
		echo "$((SECONDS - start))" >"$work/shard$i.secs"
		exit "$rc"
	) &
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
	echo "=== shard $i of $shards ($(cat "$work/shard$i.secs" 2>/dev/null || echo '?') s)"
	cat "$work/shard$i.out"
done
if [ "$failed" -ne 0 ]; then
	cat "$work/status"
	exit 1
fi
echo "ok: ${#names[@]} tests in $shards shards"
