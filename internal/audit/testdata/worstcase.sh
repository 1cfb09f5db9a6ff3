#!/bin/sh
# worstcase.sh measures the audit's peak memory (maximum resident set
# size), wall time and CPU time on its worst cases: evidence folders that
# are copies of the checkout's evidence/ with one file (or, in "all",
# every file) replaced by one at its caps, shaped to cost the audit the
# most (see worstCases in internal/audit/worstcase_test.go, and the caps,
# with the numbers last measured, in internal/audit/read.go).
#
# Usage, from the checkout's root:
#
#	internal/audit/testdata/worstcase.sh [OUT]
#
# OUT (default: a fresh temporary folder) receives the audit's build,
# the cases (about 2.5 GB; kept, and reused when OUT/cases exists) and
# each run's output. ROOT=dir audits against another checkout (default:
# this one; its evidence/ is the base of every case, and should pass);
# AUDIT=path measures another build of the audit; CASES="run-nested all"
# measures only those cases.
# Prints one line per case: its name, the audit's exit status, peak RSS
# in MB, wall time and CPU time (user and system) in seconds.
set -eu
root=${ROOT:-$(pwd)}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
audit=${AUDIT:-$out/audit}
[ -n "${AUDIT:-}" ] || go build -o "$audit" ./cmd/audit
if [ ! -d "$out/cases" ]; then
	go test ./internal/audit -run '^TestWorstCases$' -count=1 \
		-worstcase.out "$out/cases" -worstcase.base "$root/evidence" >/dev/null
fi
printf '%-30s %4s %7s %7s %7s\n' case exit rss_MB wall_s cpu_s
for d in "$out"/cases/*/; do
	name=$(basename "$d")
	if [ -n "${CASES:-}" ] && ! echo " $CASES " | grep -q " $name "; then
		continue
	fi
	status=0
	/usr/bin/time -v -o "$out/$name.time" "$audit" -root "$root" "$d" >"$out/$name.out" 2>&1 || status=$?
	rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$out/$name.time")
	wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; printf "%.1f", s}' "$out/$name.time")
	cpu=$(awk -F': ' '/(User|System) time \(seconds\)/ {s += $2} END {printf "%.1f", s}' "$out/$name.time")
	printf '%-30s %4s %7s %7s %7s\n' "$name" "$status" "$rss" "$wall" "$cpu"
done
