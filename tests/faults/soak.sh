#!/usr/bin/env bash
# The long form of the fault nemeses: each runs for DURATION (default 2m)
# instead of the suite's 5s, one after the other, and the reports are
# printed as one markdown table (the one in README.md, "Safety, measured").
#
#   tests/faults/soak.sh [DURATION] [go test flags...]
#   tests/faults/soak.sh 2m
#   tests/faults/soak.sh 30s -run 'TestKill' -race
#
# It runs without -race by default (more operations per second on the same
# CPU); pass -race to add it. The full test log goes to $LOG (default
# /tmp/lockproxy-soak.log). Exit status: go test's.
set -uo pipefail
cd "$(dirname "$0")/../.."
duration=${1:-2m}
shift || true
log=${LOG:-/tmp/lockproxy-soak.log}
table=$(mktemp)
trap 'rm -f "$table"' EXIT

echo "soak: each nemesis runs $duration; log in $log" >&2
LOCKPROXY_SOAK=$duration LOCKPROXY_FAULTS_TABLE=$table \
	go test -count=1 -timeout 0 -v "$@" ./tests/faults/ >"$log" 2>&1
status=$?
grep -E '^(--- |FAIL|ok|PASS)' "$log" >&2
printf '| nemesis | backend | client | attempts | grants | contended | errors | violations | worst overlap |\n|---|---|---|---|---|---|---|---|---|\n'
cat "$table"
exit $status
