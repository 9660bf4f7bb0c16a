#!/usr/bin/env bash
# test.sh runs lockproxy's whole test suite on a Debian machine with Go.
# It installs what the tests need when it is missing (redis-server,
# redis-cli/redis-benchmark, python3-redis and python3-limits, node and the
# node client libraries from tests/node/package-lock.json, PHP with phpredis, predis
# and Symfony Lock, PostgreSQL's server binaries, chromium), then vets and runs
# every test, the packages' own and the black-box concurrency tests under the
# race detector. The tests start their own servers on free loopback ports; a
# Redis or PostgreSQL already running is left alone.
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
# Each leg runs whatever the one before gave; the run fails at the end if
# any did, so one failure does not hide another leg's.
status=0
# gotestsum (pinned; fetched through the Go module proxy and cached) runs
# `go test -json` and prints each top-level test as it ends, so a long run
# shows its progress; passing subtests are left out (the differential corpus
# alone has thousands), failures print in full, and each leg closes with
# gotestsum's DONE count. -parallel above the two cores: most parallel
# tests wait on client processes, servers and TTLs rather than compute.
gotest() {
	go run gotest.tools/gotestsum@v1.13.0 --format testname -- -count=1 "$@" |
		grep --line-buffered -Ev '^(PASS|SKIP) [^ .]+\.[^ /]+/' || status=1
}

# Leg 1, under the race detector: every package's own tests (the proxy's on
# both front ends, quorum's and pgbridge's against real redis-servers and
# PostgreSQL, the Lua engine, the binaries), where the concurrency lives.
gotest -race -parallel 4 -timeout 15m $(go list ./... | grep -Ev '/tests(/|$)')

# Leg 2: the black-box suites (real client libraries and their own test
# suites, the differential corpus, the fault and availability suites), on
# the default front end (data-path: loops) and postgres mode at lockproxy's
# default lease row delay (200ms: deferred rows). Without the race
# detector: it slows the in-process lockproxy about tenfold, and the
# libraries' own fixed timeouts (rueidislock's 20 ms a key, redislock's
# 20 ms retry tests, ioredis's command timeouts) then time out on a loaded
# two-core machine where they never would in use; leg 4 keeps the race
# detector on the black-box concurrency that leg 1 does not reach.
gotest -parallel 4 -timeout 20m -skip '^TestAvailability$' ./tests/...

# Leg 2b, alone: the availability table compares grant rates over 600 ms
# windows, which the rest of the suite's bursts would starve.
gotest -timeout 10m -run '^TestAvailability$' ./tests/faults/

# Leg 3: what a client observes, again on the other front end, goroutines,
# which TLS listeners use (differential corpus on every backend, pub/sub,
# go-redis, redsync, redislock, MULTI, ops), with postgres mode writing
# every lease row at once (0s): the differential corpus, every black-box
# postgres test and the postgres nemeses, so that both settings are covered
# (pgbridge's own tests run each setting where it matters: TestFence at
# both, an instance at 0s among deferred ones).
LOCKPROXY_TEST_DATA_PATH=goroutines LOCKPROXY_TEST_PG_ROW_DELAY=0s gotest -parallel 4 -timeout 15m \
	-run 'TestDifferential$|TestDifferentialQuorum|TestPubSub|TestTrackingRedirect|TestRueidis|TestDifferentialPostgres|TestNative|TestNewerCommands|TestResp|TestGoRedis|TestRedsync|TestRedislock$|TestOps|TestMulti|TestScriptsBeyondLockModelAlike|TestScriptsTypedAlike|TestAdmin|TestMetrics|TestPostgres|TestRedisCLI' \
	./tests/ ./tests/faults/

# Leg 4, under the race detector: the black-box tests whose clients race
# one another through the proxy without a timing bar (several connections
# on one key, blocking pops woken across clients, transactions, pub/sub,
# the model checked against random concurrent histories).
gotest -race -parallel 4 -timeout 10m \
	-run 'TestDifferential$|TestMulti|TestPubSub$|TestPubSubAcrossInstances|TestModelHealthy|TestBlockingPopsAcrossInstances|TestTrackingAcrossInstances' ./tests/
exit $status
