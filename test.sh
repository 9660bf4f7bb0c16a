#!/usr/bin/env bash
# test.sh runs lockproxy's whole test suite on a Debian machine with Go.
# It installs what the tests need when it is missing (redis-server,
# redis-cli/redis-benchmark, python3-redis and python3-limits, node and the
# node client libraries from tests/node/package-lock.json, PHP with phpredis, predis
# and Symfony Lock, PostgreSQL's server binaries, chromium), then vets and runs
# every test with the race detector. The tests start their own servers on free
# loopback ports; a Redis or PostgreSQL already running is left alone.
set -euo pipefail
cd "$(dirname "$0")"

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
{ command -v redis-cli && command -v redis-benchmark; } >/dev/null || missing+=(redis-tools)
/usr/bin/python3 -c 'import redis' 2>/dev/null || missing+=(python3-redis)
# Python limits' RedisStorage (tests/python/limits_rate.py: TestRateLimiters).
/usr/bin/python3 -c 'import limits' 2>/dev/null || missing+=(python3-limits)
{ command -v node && command -v npm; } >/dev/null || missing+=(nodejs npm)
# Symfony Lock's RedisStore on phpredis and predis (tests/php/run.php).
command -v php >/dev/null || missing+=(php-cli)
php -r 'exit(extension_loaded("redis") ? 0 : 1);' 2>/dev/null || missing+=(php-redis)
[ -f /usr/share/php/Predis/autoload.php ] || missing+=(php-predis)
[ -f /usr/share/php/Symfony/Component/Lock/Store/RedisStore.php ] || missing+=(php-symfony-lock)
# Debian's chromium renders the admin port's status page headless
# (tests/status_page_test.go: TestStatusPage).
command -v chromium >/dev/null || missing+=(chromium)
# PostgreSQL's server binaries (initdb, postgres): the tests start a
# throwaway cluster of their own, or use LOCKPROXY_TEST_PG_DSN.
if [ -z "${LOCKPROXY_TEST_PG_DSN:-}" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
	missing+=(postgresql)
fi
if ((${#missing[@]})); then
	echo "test.sh: installing ${missing[*]}"
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	if [[ " ${missing[*]} " == *" postgresql "* ]] && [ ! -e /etc/postgresql-common/createcluster.conf ]; then
		# Install the binaries only: no cluster of Debian's on port 5432.
		$sudo mkdir -p /etc/postgresql-common
		echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.conf >/dev/null
	fi
	# Another apt (an unattended upgrade) may hold dpkg's lock: wait for it.
	$sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confold "${missing[@]}" >/dev/null
fi
if [ -f tests/node/package-lock.json ] && { [ ! -d tests/node/node_modules ] || [ tests/node/package-lock.json -nt tests/node/node_modules ]; }; then
	(cd tests/node && npm ci --no-audit --no-fund --loglevel=error)
fi

go vet ./...
# Both legs run whatever the first gives; the run fails at the end if
# either did, so one failure does not hide the other leg's.
status=0
# gotestsum (pinned; fetched through the Go module proxy and cached) runs
# `go test -json` and prints each top-level test as it ends, so a long run
# shows its progress; passing subtests are left out (the differential corpus
# alone has thousands), failures print in full, and the run closes with
# gotestsum's DONE count. -parallel 4: most parallel tests wait on client
# processes, servers and TTLs rather than compute; at Go's default (one per
# core) two cores sat a third idle and leg 1 took half as long again.
go run gotest.tools/gotestsum@v1.13.0 --format testname -- \
	-race -count=1 -parallel 4 -timeout 25m ./... |
	grep --line-buffered -Ev '^(PASS|SKIP) [^ .]+\.[^ /]+/' || status=1

# The run above is on the default front end (data-path: loops); the
# black-box suites that cover what a client observes run again on the other
# one, goroutines, which TLS listeners use (differential corpus on every
# backend, pub/sub, go-redis, redsync, redislock, MULTI, ops); the proxy package's
# own tests run both front ends above. The run above has postgres mode at
# lockproxy's default lease row delay (200ms: deferred rows); this leg runs
# it with every lease row written at once (0s): the differential corpus,
# every black-box postgres test and the postgres nemeses, so that both
# settings are covered (pgbridge's own tests run each setting where it
# matters: TestFence at both, an instance at 0s among deferred ones).
LOCKPROXY_TEST_DATA_PATH=goroutines LOCKPROXY_TEST_PG_ROW_DELAY=0s \
	go run gotest.tools/gotestsum@v1.13.0 --format testname -- \
	-race -count=1 -parallel 4 -timeout 15m \
	-run 'TestDifferential$|TestDifferentialQuorum|TestPubSub|TestTrackingRedirect|TestRueidis|TestDifferentialPostgres|TestNative|TestNewerCommands|TestResp|TestGoRedis|TestRedsync|TestRedislock$|TestOps|TestMulti|TestScriptsBeyondLockModelAlike|TestScriptsTypedAlike|TestAdmin|TestMetrics|TestPostgres|TestRedisCLI' \
	./tests/ ./tests/faults/ |
	grep --line-buffered -Ev '^(PASS|SKIP) [^ .]+\.[^ /]+/' || status=1
exit $status
