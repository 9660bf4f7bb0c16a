<?php
// Drives Symfony Lock 5.4's RedisStore (Debian php-symfony-lock) on one PHP
// Redis client against the address in argv[1]:
//
//   php run.php HOST:PORT CLIENT
//
// CLIENT is phpredis (php-redis) or predis (php-predis). It runs exclusive locks (acquire, a second lock
// refused, refresh with the key's PTTL, release, isAcquired, expiry at the
// TTL, a string key left by Symfony < 5.2 never taken), shared locks
// (several readers at once, a writer refused while they hold, readers
// refused while a writer holds, promotion), 8 forked workers incrementing a
// counter file under the exclusive lock, and 8 forked workers taking read
// and write locks while a holder table (a file under flock) records that no
// writer ever held beside anyone and that readers did overlap. Exits non-zero with the failure on stderr.

require '/usr/share/php/Symfony/Component/Lock/autoload.php';

use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\Store\RedisStore;

[, $addr, $clientName] = $argv + [null, null, null];
$i = strrpos($addr, ':');
$host = substr($addr, 0, $i);
$port = (int) substr($addr, $i + 1);
$prefix = "symfony:$clientName";

function fail(string $what): void
{
    fwrite(STDERR, "FAIL: $what\n");
    exit(1);
}

function check(bool $cond, string $what): void
{
    if (!$cond) {
        fail($what);
    }
}

// client opens a new connection: each forked worker has its own.
function client()
{
    global $host, $port, $clientName;
    if ($clientName === 'phpredis') {
        $r = new Redis();
        $r->connect($host, $port, 10.0);
        $r->setOption(Redis::OPT_READ_TIMEOUT, 10.0);
        return $r;
    }
    require_once '/usr/share/php/Predis/autoload.php';
    return new Predis\Client(['host' => $host, 'port' => $port, 'read_write_timeout' => 10]);
}

// raw sends one command and returns the reply (not for status replies:
// phpredis turns them into true).
function raw($r, string ...$args)
{
    return $r instanceof Redis ? $r->rawCommand(...$args) : $r->executeRaw($args);
}

// typeOf answers TYPE key as Redis spells it.
function typeOf($r, string $key): string
{
    if (!$r instanceof Redis) {
        return (string) $r->type($key);
    }
    $t = $r->type($key);
    check(is_int($t), "TYPE $key failed: " . $r->getLastError());
    $names = [Redis::REDIS_NOT_FOUND => 'none', Redis::REDIS_STRING => 'string', Redis::REDIS_SET => 'set',
        Redis::REDIS_LIST => 'list', Redis::REDIS_ZSET => 'zset', Redis::REDIS_HASH => 'hash'];
    return $names[$t] ?? "type $t";
}

function disconnect($r): void
{
    $r instanceof Redis ? $r->close() : $r->disconnect();
}

function factory($r): LockFactory
{
    return new LockFactory(new RedisStore($r));
}

// version of the installed Symfony Lock, from Debian's package metadata.
function version(): string
{
    $v = @shell_exec("dpkg-query -W -f '\${Version}' php-symfony-lock 2>/dev/null");
    return $v ? trim($v) : 'unknown';
}

// forkWorkers runs work($w) in n forked processes and fails unless each
// exits 0. Connections are opened by the workers themselves.
function forkWorkers(int $n, callable $work): void
{
    $pids = [];
    for ($w = 0; $w < $n; $w++) {
        $pid = pcntl_fork();
        check($pid >= 0, 'fork');
        if ($pid === 0) {
            try {
                $work($w);
            } catch (Throwable $e) {
                fwrite(STDERR, "FAIL: worker $w: " . get_class($e) . ': ' . $e->getMessage() . "\n");
                exit(1);
            }
            exit(0);
        }
        $pids[] = $pid;
    }
    $failed = 0;
    foreach ($pids as $pid) {
        pcntl_waitpid($pid, $status);
        if (!pcntl_wifexited($status) || pcntl_wexitstatus($status) !== 0) {
            $failed++;
        }
    }
    check($failed === 0, "$failed of $n workers failed");
}

// acquireSoon retries a non-blocking acquire every millisecond (Symfony's
// own blocking loop sleeps 100ms between tries, too slow for a test).
function acquireSoon($lock, bool $read): void
{
    $deadline = microtime(true) + 60;
    while (!($read ? $lock->acquireRead() : $lock->acquire())) {
        check(microtime(true) < $deadline, 'a lock not acquired within 60s');
        usleep(1000);
    }
}

// table updates the holder table file under flock: f gets and returns
// [readers, writers, maxReaders, violations, reads, writes].
function table(string $path, callable $f): void
{
    $h = fopen($path, 'c+');
    flock($h, LOCK_EX);
    $s = stream_get_contents($h);
    $t = $s === '' ? [0, 0, 0, 0, 0, 0] : array_map('intval', explode(' ', $s));
    $t = $f($t);
    ftruncate($h, 0);
    rewind($h);
    fwrite($h, implode(' ', $t));
    fflush($h);
    flock($h, LOCK_UN);
    fclose($h);
}

function serves(): void
{
    global $prefix;
    $r = client();
    $locks = factory($r);

    // Exclusive: acquire, a second lock on the resource refused, refresh.
    $key = "$prefix:x";
    $lock = $locks->createLock($key, 5.0, false);
    check($lock->acquire(), 'acquire a free lock');
    check($lock->isAcquired(), 'isAcquired after acquire');
    check(typeOf($r, $key) === 'zset', 'TYPE of the lock key is ' . typeOf($r, $key));
    $ttl = raw($r, 'PTTL', $key);
    check($ttl > 0 && $ttl <= 5000, "PTTL after acquire = $ttl");
    $other = $locks->createLock($key, 5.0, false);
    check(!$other->acquire(), 'a second lock acquired a held resource');
    check(!$other->isAcquired(), 'isAcquired of a lock someone else holds');
    check(!$other->acquireRead(), 'a reader acquired beside a writer');
    $lock->refresh(10.0);
    $ttl = raw($r, 'PTTL', $key);
    check($ttl > 5000 && $ttl <= 10000, "PTTL after refresh(10) = $ttl");
    $lock->release();
    check(!$lock->isAcquired(), 'isAcquired after release');
    check(raw($r, 'EXISTS', $key) === 0, 'the key outlived its release');
    check($other->acquire(), 'acquire after release');
    $other->release();

    // A lock ends at its TTL; a key holding a string (a Symfony < 5.2 lock)
    // is never taken.
    $short = $locks->createLock($key, 0.2, false);
    check($short->acquire(), 'acquire with a 0.2s TTL');
    $ttl = raw($r, 'PTTL', $key);
    check($ttl > 0 && $ttl <= 200, "PTTL with a 0.2s TTL = $ttl");
    usleep(250000);
    check(!$short->isAcquired(), 'isAcquired past the TTL');
    check($other->acquire(), 'acquire of an expired lock');
    $other->release();
    check(raw($r, 'SET', "$prefix:old", 'token', 'PX', '10000') !== false, 'SET a string lock');
    check(!$locks->createLock("$prefix:old", 5.0, false)->acquire(), 'acquired a key holding a string');
    check(!$locks->createLock("$prefix:old", 5.0, false)->acquireRead(), 'read-acquired a key holding a string');

    // Shared: readers together, a writer refused while any holds.
    $key = "$prefix:s";
    $readers = [];
    foreach ([1, 2, 3] as $n) {
        $readers[$n] = $locks->createLock($key, 5.0, false);
        check($readers[$n]->acquireRead(), "reader $n acquires beside the others");
    }
    check(raw($r, 'ZCARD', $key) === 3, 'ZCARD with three readers = ' . raw($r, 'ZCARD', $key));
    $writer = $locks->createLock($key, 5.0, false);
    check(!$writer->acquire(), 'a writer acquired while readers hold');
    check(!$readers[1]->acquire(), 'a reader promoted to writer beside other readers');
    $readers[1]->refresh(10.0);
    $ttl = raw($r, 'PTTL', $key);
    check($ttl > 5000 && $ttl <= 10000, "PTTL after a reader's refresh(10) = $ttl");
    $readers[1]->release();
    $readers[2]->release();
    check(!$writer->acquire(), 'a writer acquired while one reader holds');
    check($readers[3]->acquire(), 'the only reader promoted to writer');
    check(!$writer->acquireRead(), 'a reader acquired beside a promoted writer');
    $readers[3]->release();
    check($writer->acquire(), 'a writer acquired once the readers left');
    check(!$readers[1]->acquireRead(), 'a reader acquired while a writer holds');
    $writer->release();
    check(raw($r, 'EXISTS', $key) === 0, 'the shared key outlived its last release');

    // Counter: 8 workers, each increment a read, a sleep and a write of a
    // file under the exclusive lock; a lost increment means two holders.
    [$workers, $iter] = [8, 15];
    $file = tempnam(sys_get_temp_dir(), 'symfony-counter');
    file_put_contents($file, '0');
    disconnect($r);
    forkWorkers($workers, function (int $w) use ($file, $iter): void {
        global $prefix;
        $locks = factory(client());
        for ($j = 0; $j < $iter; $j++) {
            $lock = $locks->createLock("$prefix:counter", 10.0, false);
            acquireSoon($lock, false);
            $n = (int) file_get_contents($file);
            usleep(500); // a holder's work: widens the window a second holder would use
            file_put_contents($file, (string) ($n + 1));
            $lock->release();
        }
    });
    $count = (int) file_get_contents($file);
    unlink($file);
    check($count === $workers * $iter, "counter = $count; want " . ($workers * $iter) . ': two workers held the lock at once');

    // Shared under concurrency: each worker reads three times in four and
    // writes the fourth; the holder table sees every grant and release.
    $file = tempnam(sys_get_temp_dir(), 'symfony-holders');
    forkWorkers($workers, function (int $w) use ($file): void {
        global $prefix;
        $locks = factory(client());
        for ($j = 0; $j < 12; $j++) {
            $write = ($w + $j) % 4 === 0;
            $lock = $locks->createLock("$prefix:rw", 10.0, false);
            acquireSoon($lock, !$write);
            table($file, function (array $t) use ($write): array {
                [$rd, $wr, $max, $bad, $reads, $writes] = $t;
                if ($wr > 0 || ($write && $rd > 0)) {
                    $bad++;
                }
                $write ? $wr++ : $rd++;
                $write ? $writes++ : $reads++;
                return [$rd, $wr, max($max, $rd), $bad, $reads, $writes];
            });
            usleep($write ? 1000 : 3000);
            table($file, function (array $t) use ($write): array {
                $write ? $t[1]-- : $t[0]--;
                return $t;
            });
            $lock->release();
            usleep(random_int(0, 1000));
        }
    });
    [, , $maxReaders, $violations, $reads, $writes] = array_map('intval', explode(' ', file_get_contents($file)));
    unlink($file);
    check($violations === 0, "$violations grants overlapped a writer: a writer held beside another holder");
    check($reads === 72 && $writes === 24, "reads $reads, writes $writes; want 72 and 24");
    check($maxReaders >= 2, "at most $maxReaders reader held at once: shared locks never overlapped");

    echo "OK symfony/lock ", version(), " $prefix: counter $count, readers at once up to $maxReaders\n";
}

if (!in_array($clientName, ['phpredis', 'predis'], true)) {
    fail('usage: php run.php HOST:PORT phpredis|predis');
}
serves();
