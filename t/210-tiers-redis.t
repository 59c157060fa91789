# The Redis replay tier (idempotency_store ... redis=ADDR): a replay
# served from Redis is the one MySQL serves, byte for byte, without a
# MySQL round trip; the fingerprint is still checked; only completed
# responses get there, with the key's remaining retention as TTL; a value
# that is not a readable entry is never replayed.  Redis down, hung
# (SIGSTOP) or restarted: requests go on through MySQL, each Redis
# operation bounded by redis_timeout, one error line per outage, and the
# module comes back by itself.
#
# Two Redis servers: the suite's (TEST_NGINX_REDIS_PORT, no password) and
# a private one this file starts (with a password), which the outage
# tests stop, hang and restart.  One worker, so that "one line per
# outage" is one line.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use Time::HiRes ();
use Digest::SHA ();

# the outage tests' redis_timeout: under valgrind even a healthy Redis
# can look slower than 200 ms
$ENV{TEST_NGINX_REDIS_TIMEOUT_MS} = $ENV{TEST_NGINX_USE_VALGRIND} ? 3000 : 200;

# the private server, and a port where nothing listens
$ENV{TEST_NGINX_REDIS2_PORT} = free_port();
$ENV{TEST_NGINX_REDIS_DOWN_PORT} = free_port();
start_redis($ENV{TEST_NGINX_REDIS2_PORT}, '--requirepass', 't210-pass');

# an entry in the documented format (ngx_http_idempotency_entry.h), made
# without the module's encoder, and signed for key (scope '') with the
# suite's secret, or with secret, or not at all (secret => '')
sub entry {
    my (%e) = @_;
    my $fp = defined $e{fp} ? pack('H64', $e{fp}) : "\0" x 32;
    my $entry = 'IDE' . pack('CCC3Q>Na32N', $e{version} // 2, $e{flags} // 1,
                             0, 0, 0, $e{expires} // time + 3600,
                             $e{epoch} // 1, $fp,
                             $e{len} // length $e{record})
                . $e{record};
    return $entry if defined $e{secret} && $e{secret} eq '';
    return signed2($e{key}, $entry, $e{secret});
}

# the entry followed by its tag, as the module writes it to Redis for key
# (scope '') in the store "main" of tier_stores (its database, the default
# table): HMAC-SHA256 over the domain, the store's names, the key hash and
# the entry
sub signed2 {
    my ($key, $entry, $secret, $store, $table) = @_;
    my $db = $ENV{TEST_NGINX_MYSQL_DB};
    $store //= 'main';
    $table //= 'idempotency_keys';
    return $entry . Digest::SHA::hmac_sha256(
        'idempotency-entry/2'
        . pack('nnn', length $store, length $db, length $table)
        . $store . $db . $table
        . pack('H64', IdemStress::key_hash_hex($key, '')) . $entry,
        $secret // $TierTest::SECRET);
}

sub r2 { redis_cmd($ENV{TEST_NGINX_REDIS2_PORT}, ['AUTH', 't210-pass'], @_) }

# the store "main" of the outage tests: the private server, with its
# password (or another) and the outage tests' redis_timeout
sub r2_stores {
    my ($password) = @_;

    return tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS2_PORT}"
                               . " redis_password=" . ($password // 't210-pass')
                               . " redis_timeout=$ENV{TEST_NGINX_REDIS_TIMEOUT_MS}ms");
}

no_shuffle();
run_tests();

__DATA__

=== TEST 1: a Redis replay is byte-identical to a MySQL replay
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}",
                      plain => '')
--- config eval
IdemTest::orders_location(via => 'plain', add_header => 'X-Idem X-Tier')
. IdemTest::via_location('plain', add_header => 'X-Idem X-Tier')
--- init
my %q = (key => 't210-1', uri => '/orders?cookies=2', body => 'x');
my $r = http_req(%q);
is($r->{status}, 201, 'first request executed');
wait_redis($ENV{TEST_NGINX_REDIS_PORT}, 'main', 't210-1');
my $m = http_req(%q, headers => ['X-Via: plain']);
is($m->{tier}, 'mysql', 'the store without tiers replays from MySQL');
my $s = http_req(%q);
is($s->{tier}, 'redis', 'the store with Redis replays from it');
is(strip_volatile($s->{raw}), strip_volatile($m->{raw}),
   'Redis replay and MySQL replay are byte-identical');
--- more_headers
Idempotency-Key: t210-1
--- request
POST /orders?cookies=2
x
--- error_code: 201
--- response_headers
X-Idem: replay
X-Tier: redis
Idempotent-Replayed: true
Content-Type: application/json
--- raw_response_headers_like: Set-Cookie: c1=v1; Path=/\r\nSet-Cookie: c2=v2; Path=/\r\n
--- response_body_like: ^\{"order_id":"ord-\d+","key":"t210-1","execution":1,
--- error_log eval
"idempotency: key " . substr(IdemTest::key_hash_hex('t210-1'), 0, 8)
. " found in redis"
--- no_error_log
[error]
[warn]



=== TEST 2: a large response (many times hiredis' 16 KiB read) comes back whole
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}")
--- config eval
IdemTest::orders_location(idempotency_max_response_size => '2m',
    add_header => 'X-Tier')
--- init
my $r = http_req(key => 't210-2', uri => '/orders?size=500000', body => 'x');
is($r->{status}, 201, 'executed');
is(length $r->{body}, 500000, 'executed: whole body');
wait_redis($ENV{TEST_NGINX_REDIS_PORT}, 'main', 't210-2');
--- more_headers
Idempotency-Key: t210-2
--- request
POST /orders?size=500000
x
--- error_code: 201
--- response_headers
X-Tier: redis
Idempotent-Replayed: true
Content-Length: 500000
--- response_body eval
my $p = CORE::join('', map { chr($_ % 251) } 0 .. 250); substr($p x 2000, 0, 500000)
--- no_error_log
[error]



=== TEST 3: the fingerprint is checked against the Redis entry: 422
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}")
--- config eval
IdemTest::orders_location(add_header => 'X-Idem X-Tier')
--- init
is(http_req(key => 't210-3', body => 'first')->{status}, 201, 'executed');
wait_redis($ENV{TEST_NGINX_REDIS_PORT}, 'main', 't210-3');
--- more_headers
Idempotency-Key: t210-3
--- request eval
["POST /orders\nsecond", "POST /orders\nfirst"]
--- error_code eval
[422, 201]
--- response_headers eval
["X-Idem: mismatch\nX-Tier: redis", "X-Idem: replay\nX-Tier: redis"]
--- response_body_like eval
['"type":"urn:ngx-idempotency:problem:key-reused"', '"execution":1']
--- no_error_log
[error]



=== TEST 4: the completion writes Redis with the retention left as TTL
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}")
--- config eval
IdemTest::orders_location(idempotency_ttl => '1h', add_header => 'X-Tier')
--- init
is(http_req(key => 't210-4', body => 'x')->{status}, 201, 'executed');
wait_redis($ENV{TEST_NGINX_REDIS_PORT}, 'main', 't210-4');
my $ttl = redis_cmd($ENV{TEST_NGINX_REDIS_PORT}, 'TTL',
                    redis_key('main', '', 't210-4'));
cmp_ok($ttl, '>', 3590, "TTL $ttl close to the retention");
cmp_ok($ttl, '<=', 3600, "TTL $ttl not above the retention");
--- more_headers
Idempotency-Key: t210-4
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Tier: redis
--- no_error_log
[error]



=== TEST 5: a replay that MySQL serves fills Redis, TTL = the retention left
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}",
                      plain => '')
--- config eval
IdemTest::orders_location(via => 'plain', idempotency_ttl => '1h',
    add_header => 'X-Idem X-Tier')
. IdemTest::via_location('plain', idempotency_ttl => '1h')
--- init
is(http_req(key => 't210-5', body => 'x', headers => ['X-Via: plain'])->{status},
   201, 'executed through the store without tiers');
is(redis_cmd($ENV{TEST_NGINX_REDIS_PORT}, 'EXISTS',
             redis_key('main', '', 't210-5')), 0, 'not in Redis yet');
# until less than the whole retention is left
IdemStress::wait_for('the retention of t210-5 to run down', 10, sub {
    sql("SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(3), expires_at)"
        . " FROM idempotency_keys WHERE key_hash = X'"
        . key_hash_hex('t210-5') . "'") <= 3597 });
is(http_req(key => 't210-5', body => 'x')->{tier}, 'mysql', 'MySQL replays');
wait_redis($ENV{TEST_NGINX_REDIS_PORT}, 'main', 't210-5');
my $ttl = redis_cmd($ENV{TEST_NGINX_REDIS_PORT}, 'TTL',
                    redis_key('main', '', 't210-5'));
cmp_ok($ttl, '>', 3585, "TTL $ttl: the retention left");
cmp_ok($ttl, '<=', 3598, "TTL $ttl: not the whole retention");
--- more_headers
Idempotency-Key: t210-5
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: replay
X-Tier: redis
--- response_body_like: "execution":1,
--- no_error_log
[error]



=== TEST 6: an entry in Redis is replayed without asking MySQL
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}")
--- config eval
IdemTest::orders_location(add_header => 'X-Tier', count => 1)
--- init
# no row in MySQL, no execution upstream: only Redis knows this key
my $rec = IdemTest::record(202, [['Content-Type', 'text/plain'],
                                 ['X-Seeded', 'one'], ['X-Seeded', 'two']],
                           "from the entry\n");
redis_cmd($ENV{TEST_NGINX_REDIS_PORT}, 'SET', redis_key('main', '', 't210-6'),
          main::entry(key => 't210-6', record => $rec,
                      fp => fingerprint('POST', '/orders', 'x')),
          'EX', '600');
--- more_headers eval
["Idempotency-Key: t210-6", ""]
--- request eval
["POST /orders\nx", "GET /count?key=t210-6"]
--- error_code eval
[202, 200]
--- response_headers eval
["X-Tier: redis\nContent-Type: text/plain\nIdempotent-Replayed: true", ""]
--- raw_response_headers_like eval
["X-Seeded: one\r\nX-Seeded: two\r\n", ""]
--- response_body_like eval
["^from the entry\n\\z", '^0$']
--- no_error_log
[error]



=== TEST 7: a value that is not the module's own entry for the key is never replayed: a miss, MySQL answers, one line a minute
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}")
--- config eval
IdemTest::orders_location(add_header => 'X-Idem X-Tier')
--- init
my $port = $ENV{TEST_NGINX_REDIS_PORT};
my $key = redis_key('main', '', 't210-7');
is(http_req(key => 't210-7', body => 'x')->{status}, 201, 'executed');
wait_redis($port, 'main', 't210-7');
my $good = redis_cmd($port, 'GET', $key);
ok(length($good) > 84, 'the completion wrote an entry');
my $rec = IdemTest::record(200, [], 'seeded, never to be replayed');
my $fp = fingerprint('POST', '/orders', 'x');
my %k = (key => 't210-7', fp => $fp);
my @bad = (
    # not signed for this key with this store's secret
    ['garbage', 'garbage'],
    [main::entry(%k, record => $rec, secret => ''), 'an unsigned entry'],
    [main::entry(%k, record => $rec, secret => 'not-the-store-secret-42'),
     'an entry signed with another secret'],
    [main::entry(%k, key => 't210-other', record => $rec),
     'an entry signed for another key (copied or planted)'],
    [substr($good, 0, -33) . 'X' . substr($good, -32),
     "the module's entry with one body byte changed"],
    [$good . 'x', "the module's entry with a byte appended"],
    [substr($good, 0, -32), "the module's entry without its tag"],
    # signed, yet no entry a replay may send: the tag is no licence
    [main::signed2('t210-7', "IDE\x02" . "\0" x 10), 'truncated entry'],
    [main::entry(%k, record => $rec, len => length($rec) + 1),
     'record length does not match'],
    [main::entry(%k, record => 'IDR1 not a record'), 'malformed record'],
    [main::entry(%k, record => $rec, expires => 0), 'bad expiry'],
    [main::entry(%k, record => $rec, flags => 0x80), 'unknown flags'],
    [main::entry(%k, record => $rec, flags => 0),
     'a fingerprint without its flag'],
    [main::entry(%k, record => IdemTest::record(200,
         [['X-A', "v\r\nSet-Cookie: planted=1"]], 'poisoned')),
     'a header value with CR, LF'],
    [main::entry(%k, record => IdemTest::record(200,
         [['Transfer-Encoding', 'chunked']], 'poisoned')),
     'a Transfer-Encoding header'],
    [main::entry(%k, record => IdemTest::record(200,
         [['Content-Length', '3']], 'poisoned')),
     'a second Content-Length'],
    [main::entry(%k, record => IdemTest::record(200,
         [['Bad Name', 'x']], 'poisoned')),
     'a header name that is not a token'],
    [main::entry(%k, record => IdemTest::record(999, [], 'poisoned')),
     'a status of 999'],
);
for my $b (@bad) {
    redis_cmd($port, 'SET', $key, $b->[0], 'EX', '600');
    my $r = http_req(key => 't210-7', body => 'x');
    is($r->{status}, 201, "$b->[1]: replayed");
    is($r->{tier}, 'mysql', "$b->[1]: by MySQL");
    like($r->{body}, qr/"execution":1,/, "$b->[1]: the executed response");
    IdemStress::wait_for("$b->[1]: the entry written over", 10, sub {
        (redis_cmd($port, 'GET', $key) // '') ne $b->[0] });
    is(http_req(key => 't210-7', body => 'x')->{tier}, 'redis',
       "$b->[1]: the MySQL replay wrote a good entry over it");
}
# the module's own entry made permanent (SET without EX, PERSIST): a miss
redis_cmd($port, 'SET', $key, $good);
my $r = http_req(key => 't210-7', body => 'x');
is($r->{tier}, 'mysql', 'an entry without expiry: MySQL replays');
redis_cmd($port, 'DEL', $key);
redis_cmd($port, 'RPUSH', $key, 'a list');
$r = http_req(key => 't210-7', body => 'x');
is($r->{tier}, 'mysql', 'a list under the key: MySQL replays');
redis_cmd($port, 'DEL', $key);
# one line for all of them, the first: at most one a minute per worker
my $log = $Test::Nginx::Util::ErrLogFile // $Test::Nginx::Socket::ErrLogFile;
open my $fh, '<', $log or die "$log: $!";
my $id = IdemStress::key_id('t210-7');
my @lines = grep { /value of key $id ignored/ } <$fh>;
is(scalar @lines, 1, 'one error-log line for all of them');
like($lines[0] // '', qr/\[warn\].*redis=127\.0\.0\.1:\d+: value of key $id ignored: not signed with this store's secret for this key \(7 bytes\); 0 more ignored since the last such line/,
     'it names the first, by the key hash');
# the block: an entry of another format version, signed, within the minute
redis_cmd($port, 'SET', $key,
          main::entry(%k, version => 3, record => $rec));
--- more_headers
Idempotency-Key: t210-7
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: replay
X-Tier: mysql
--- response_body_like: "execution":1,
--- no_error_log
an entry of another format version
[error]



=== TEST 8: an in-flight key is never written to Redis
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}")
--- config eval
IdemTest::orders_location(idempotency_lease => '6s',
    add_header => 'X-Idem X-Tier')
--- init
my $key = redis_key('main', '', 't210-8');
my $pid = bg_request('POST', '/orders?delay=1500', 't210-8', 'x', 'claimed');
my $d = http_req(key => 't210-8', uri => '/orders?delay=1500', body => 'x');
is($d->{status}, 409, 'in flight: 409');
is($d->{tier}, 'mysql', 'in flight: decided by MySQL');
is(redis_cmd($ENV{TEST_NGINX_REDIS_PORT}, 'EXISTS', $key), 0,
   'in flight: nothing in Redis');
waitpid $pid, 0;
wait_redis($ENV{TEST_NGINX_REDIS_PORT}, 'main', 't210-8');
pass('completed: in Redis');
--- more_headers
Idempotency-Key: t210-8
--- request
POST /orders?delay=1500
x
--- error_code: 201
--- response_headers
X-Idem: replay
X-Tier: redis
--- no_error_log
[error]



=== TEST 9: the cache zone, then Redis, then MySQL; a Redis hit fills the zone
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT} "
                              . "cache=idem_t210:1m")
--- config eval
IdemTest::orders_location(add_header => 'X-Tier')
--- init
my $rec = IdemTest::record(200, [['Content-Type', 'text/plain']], "seeded\n");
redis_cmd($ENV{TEST_NGINX_REDIS_PORT}, 'SET', redis_key('main', '', 't210-9'),
          main::entry(key => 't210-9', record => $rec,
                      fp => fingerprint('POST', '/orders', 'x')),
          'EX', '600');
--- more_headers
Idempotency-Key: t210-9
--- request eval
["POST /orders\nx", "POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["X-Tier: redis", "X-Tier: shm", "X-Tier: shm"]
--- response_body eval
["seeded\n", "seeded\n", "seeded\n"]
--- no_error_log
[error]



=== TEST 10: an entry that does not know the row's fingerprint serves only requests that do not compare it
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}",
                      plain => '')
--- config eval
IdemTest::orders_location(via => 'plain strict',
    idempotency_fingerprint => 'off', add_header => 'X-Idem X-Tier')
. IdemTest::via_location('plain')
. IdemTest::via_location('strict', idempotency => 'main',
                         add_header => 'X-Idem X-Tier')
--- init
# executed with fingerprints compared: the row holds the real one
is(http_req(key => 't210-fp', body => 'x', headers => ['X-Via: plain'])->{status},
   201, 'executed');
# a replay that did not compare: its entry cannot know the fingerprint
my $r = http_req(key => 't210-fp', body => 'x');
is($r->{tier}, 'mysql', 'replayed by MySQL, entry written');
wait_redis($ENV{TEST_NGINX_REDIS_PORT}, 'main', 't210-fp');
is(http_req(key => 't210-fp', body => 'other')->{tier}, 'redis',
   'a request that does not compare is served by Redis');
--- more_headers eval
["Idempotency-Key: t210-fp\nX-Via: strict", "Idempotency-Key: t210-fp\nX-Via: strict"]
--- request eval
["POST /orders\nother", "POST /orders\nx"]
--- error_code eval
[422, 201]
--- response_headers eval
["X-Idem: mismatch\nX-Tier: mysql", "X-Idem: replay\nX-Tier: mysql"]
--- no_error_log
[error]



=== TEST 11: the unix socket address, AUTH and SELECT
--- http_config eval
TierTest::tier_stores(
    main => "redis=unix:$ENV{TEST_NGINX_REDIS_SOCKET}",
    auth => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS2_PORT} "
            . "redis_password=t210-pass redis_db=3")
--- config eval
IdemTest::orders_location(add_header => 'X-Tier') . q{
    location /auth/ {
        idempotency auth;
        proxy_pass http://backend/;
        add_header X-Tier $idempotency_tier always;
    }
}
--- init
is(http_req(key => 't210-10', body => 'x')->{status}, 201, 'unix: executed');
is(http_req(key => 't210-10a', uri => '/auth/x', body => 'x')->{status}, 201,
   'auth: executed');
wait_redis($ENV{TEST_NGINX_REDIS_PORT}, 'main', 't210-10');
wait_redis($ENV{TEST_NGINX_REDIS2_PORT}, 'auth', 't210-10a',
           ['AUTH', 't210-pass'], ['SELECT', '3']);
my @in3 = main::r2(['SELECT', '3'],
                  ['EXISTS', redis_key('auth', '', 't210-10a')]);
is($in3[2], 1, 'stored in database 3');
my @in0 = main::r2(['EXISTS', redis_key('auth', '', 't210-10a')]);
is($in0[1], 0, 'not in database 0');
--- more_headers eval
["Idempotency-Key: t210-10", "Idempotency-Key: t210-10a"]
--- request eval
["POST /orders\nx", "POST /auth/x\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Tier: redis", "X-Tier: redis"]
--- no_error_log
[error]



=== TEST 12: Redis down: requests go on through MySQL, one error line
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_DOWN_PORT} "
                              . "redis_timeout=$ENV{TEST_NGINX_REDIS_TIMEOUT_MS}ms")
--- config eval
IdemTest::orders_location(add_header => 'X-Idem X-Tier')
--- init
is(http_req(key => 't210-11', body => 'x')->{status}, 201, 'executed');
for (1 .. 4) {
    my $r = http_req(key => 't210-11', body => 'x');
    is($r->{tier}, 'mysql', 'replayed by MySQL');
}
--- more_headers
Idempotency-Key: t210-11
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: replay
X-Tier: mysql
--- grep_error_log eval
qr/\[error\].*redis=127\.0\.0\.1:\d+: connect failed/
--- grep_error_log_out eval
qr/\A[^\n]*connect failed\n\z/



=== TEST 13: Redis hangs (SIGSTOP): each request waits redis_timeout at most
--- http_config eval
main::r2_stores()
--- config eval
IdemTest::orders_location(add_header => 'X-Idem X-Tier')
--- init
my $port = $ENV{TEST_NGINX_REDIS2_PORT};
is(http_req(key => 't210-12', body => 'x')->{status}, 201, 'executed');
wait_redis($port, 'main', 't210-12', ['AUTH', 't210-pass']);
is(http_req(key => 't210-12', body => 'x')->{tier}, 'redis', 'from Redis');
redis_signal($port, 'STOP');
for (1 .. 5) {
    my $r = http_req(key => 't210-12', body => 'x');
    is($r->{status}, 201, 'hung: replayed');
    is($r->{tier}, 'mysql', 'hung: by MySQL');
    cmp_ok($r->{elapsed}, '<', 1, 'hung: bounded by redis_timeout')
        unless $ENV{TEST_NGINX_USE_VALGRIND};
}
--- more_headers
Idempotency-Key: t210-12
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: replay
X-Tier: mysql
--- grep_error_log eval
qr/\[error\].*redis=127\.0\.0\.1:\d+: lookup timed out: \d+ ms/
--- grep_error_log_out eval
qr/\A[^\n]*lookup timed out: $ENV{TEST_NGINX_REDIS_TIMEOUT_MS} ms\n\z/



=== TEST 14: Redis hangs, then answers again: the module comes back by itself
--- http_config eval
main::r2_stores()
--- config eval
IdemTest::orders_location(add_header => 'X-Tier')
--- init
my $port = $ENV{TEST_NGINX_REDIS2_PORT};
redis_signal($port, 'CONT');
is(http_req(key => 't210-13', body => 'x')->{status}, 201, 'executed');
wait_redis($port, 'main', 't210-13', ['AUTH', 't210-pass']);
redis_signal($port, 'STOP');
for (1 .. 4) {
    is(http_req(key => 't210-13', body => 'x')->{tier}, 'mysql', 'hung: MySQL');
}
redis_signal($port, 'CONT');
my $r = wait_for_tier('redis', 15, key => 't210-13', body => 'x');
is($r->{tier}, 'redis', 'Redis serves again');
--- more_headers
Idempotency-Key: t210-13
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Tier: redis
--- error_log eval
qr/\[notice\].*redis=127\.0\.0\.1:\d+: reachable again/



=== TEST 15: Redis restarted mid-run (empty): one error line, then it serves again
--- http_config eval
main::r2_stores()
--- config eval
IdemTest::orders_location(add_header => 'X-Tier')
--- init
my $port = $ENV{TEST_NGINX_REDIS2_PORT};
redis_signal($port, 'CONT');
is(http_req(key => 't210-14', body => 'x')->{status}, 201, 'executed');
wait_redis($port, 'main', 't210-14', ['AUTH', 't210-pass']);
is(http_req(key => 't210-14', body => 'x')->{tier}, 'redis', 'from Redis');
stop_redis($port);
for (1 .. 3) {
    my $r = http_req(key => 't210-14', body => 'x');
    is($r->{status}, 201, 'stopped: replayed');
    is($r->{tier}, 'mysql', 'stopped: by MySQL');
}
start_redis($port, '--requirepass', 't210-pass');
my $r = wait_for_tier('redis', 15, key => 't210-14', body => 'x');
is($r->{tier}, 'redis', 'the restarted Redis serves again');
--- more_headers
Idempotency-Key: t210-14
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Tier: redis
--- grep_error_log eval
qr/\[error\].*redis=127\.0\.0\.1:\d+: [^;]*; replays are looked up in MySQL/
--- grep_error_log_out eval
qr/\A[^\n]*: connect failed: Connection refused; replays are looked up in MySQL\n\z/



=== TEST 16: a wrong password: one error line, requests go on through MySQL
--- http_config eval
main::r2_stores('not-the-one')
--- config eval
IdemTest::orders_location(add_header => 'X-Tier')
--- init
is(http_req(key => 't210-15', body => 'x')->{status}, 201, 'executed');
for (1 .. 3) {
    is(http_req(key => 't210-15', body => 'x')->{tier}, 'mysql', 'MySQL');
}
--- more_headers
Idempotency-Key: t210-15
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Tier: mysql
--- grep_error_log eval
qr/\[error\].*handshake failed: WRONGPASS/
--- grep_error_log_out eval
qr/\A[^\n]*handshake failed: WRONGPASS\n\z/
--- no_error_log
not-the-one



=== TEST 17: a client that leaves while Redis is asked leaves nothing behind
--- http_config eval
main::r2_stores()
--- config eval
IdemTest::orders_location(add_header => 'X-Tier')
--- init
my $port = $ENV{TEST_NGINX_REDIS2_PORT};
is(http_req(key => 't210-16', body => 'x')->{status}, 201, 'executed');
wait_redis($port, 'main', 't210-16', ['AUTH', 't210-pass']);
redis_signal($port, 'STOP');
my $r = http_req(key => 't210-16', body => 'x', timeout => 0.1);
is($r->{status}, 0, 'the client gave up before an answer');
# the lookup it left behind times out meanwhile
wait_log(qr/lookup timed out/);
--- more_headers
Idempotency-Key: t210-16
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Tier: mysql
--- response_body_like: "execution":1,
--- no_error_log
[alert]
[crit]



=== TEST 18: redis_... parameters without redis=
--- http_config eval
TierTest::tier_stores(main => 'redis_db=2')
--- config
    location /t { idempotency main; }
--- must_die
--- error_log
idempotency store "main" has "redis_..." parameters but no "redis=" server



=== TEST 19: a bad Redis address
--- http_config eval
TierTest::tier_stores(main => 'redis=unix:')
--- config
    location /t { idempotency main; }
--- must_die
--- error_log
invalid address "redis=unix:" in "idempotency_store", it must be IP:port, host:port or unix:/path



=== TEST 20: a bad redis_timeout, never a password in the log
--- http_config eval
TierTest::tier_stores(main => 'redis=127.0.0.1:1 redis_timeout=0 redis_password=sekrit-redis')
--- config
    location /t { idempotency main; }
--- must_die
--- error_log
invalid parameter "redis_timeout=0" in "idempotency_store"
--- no_error_log
sekrit-redis



=== TEST 21: IPv6 is refused (the library would look it up as a name)
--- http_config eval
TierTest::tier_stores(main => 'redis=[::1]:6379')
--- config
    location /t { idempotency main; }
--- must_die
--- error_log
"redis=[::1]:6379" of "idempotency_store" has no IPv4 address; use IPv4 or a unix socket



=== TEST 22: secret rotation: entries signed with the new or an old secret are replayed, new entries are signed with the first
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}"
    . " secret=t210-new-secret-0123456789 secret_file=../html/old.secret")
--- user_files
>>> old.secret
t210-old-secret-0123456789
--- config eval
IdemTest::orders_location(add_header => 'X-Tier')
--- init
my $port = $ENV{TEST_NGINX_REDIS_PORT};
my $fp = fingerprint('POST', '/orders', 'x');
my %n = (new => 't210-new-secret-0123456789',
         old => 't210-old-secret-0123456789',
         other => 't210-other-secret-012345');
for my $s (qw(new old other)) {
    my $rec = IdemTest::record(202, [['Content-Type', 'text/plain']],
                               "signed with $s\n");
    redis_cmd($port, 'SET', redis_key('main', '', "t210-22-$s"),
              main::entry(key => "t210-22-$s", fp => $fp, record => $rec,
                          secret => $n{$s}),
              'EX', '600');
}
my $r = http_req(key => 't210-22-new', body => 'x');
is("$r->{status} $r->{tier} $r->{body}", "202 redis signed with new\n",
   'the new secret: replayed');
$r = http_req(key => 't210-22-old', body => 'x');
is("$r->{status} $r->{tier} $r->{body}", "202 redis signed with old\n",
   'an old secret: replayed');
$r = http_req(key => 't210-22-other', body => 'x');
is("$r->{status} $r->{tier}", '201 mysql', 'another secret: a miss, executed');
# what the module writes carries the first secret's tag
$r = http_req(key => 't210-22-w', body => 'x');
is($r->{status}, 201, 'executed');
wait_redis($port, 'main', 't210-22-w');
my $v = redis_cmd($port, 'GET', redis_key('main', '', 't210-22-w'));
my $entry = substr($v, 0, -32);
is(unpack('H*', substr($v, -32)),
   unpack('H*', substr(main::signed2('t210-22-w', $entry, $n{new}), -32)),
   'the entry written is signed with the first secret');
--- more_headers
Idempotency-Key: t210-22-w
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Tier: redis
--- no_error_log
[error]



=== TEST 23: redis_max_entry: a larger value is a miss, never read whole; a larger entry is not written
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}"
                              . " redis_max_entry=4k")
--- config eval
IdemTest::orders_location(add_header => 'X-Tier')
--- init
my $port = $ENV{TEST_NGINX_REDIS_PORT};
my $rec = IdemTest::record(202, [], 'x' x 8000);
redis_cmd($port, 'SET', redis_key('main', '', 't210-23'),
          main::entry(key => 't210-23', record => $rec,
                      fp => fingerprint('POST', '/orders', 'x')),
          'EX', '600');
my $r = http_req(key => 't210-23', body => 'x');
is("$r->{status} $r->{tier}", '201 mysql', 'an 8 KB entry: a miss, executed');
$r = http_req(key => 't210-23-big', uri => '/orders?size=6000', body => 'x');
is($r->{status}, 201, 'a 6 KB response executed');
$r = http_req(key => 't210-23-small', uri => '/orders?size=100', body => 'x');
is($r->{status}, 201, 'a 100-byte response executed');
# the entries go out in order on one connection: once the later one is
# there, the earlier one would be too
wait_redis($port, 'main', 't210-23-small');
is(redis_cmd($port, 'EXISTS', redis_key('main', '', 't210-23-big')), 0,
   'the 6 KB entry is not in Redis');
--- more_headers
Idempotency-Key: t210-23-big
--- request
POST /orders?size=6000
x
--- error_code: 201
--- response_headers
X-Tier: mysql
--- error_log eval
qr/value of key ${\ IdemStress::key_id('t210-23')} ignored: over redis_max_entry \(4097 bytes\)/
--- no_error_log
[error]



=== TEST 24: Redis without a secret
--- http_config eval
"idempotency_store main mysql=127.0.0.1:1 user=u database=d"
. " redis=127.0.0.1:6379;"
--- config
    location /t { idempotency main; }
--- must_die
--- error_log
idempotency store "main" has "redis=" but no "secret=" or "secret_file=" to sign its entries with



=== TEST 25: a short secret, never echoed
--- http_config eval
"idempotency_store main mysql=127.0.0.1:1 user=u database=d"
. " redis=127.0.0.1:6379 secret=sekrit-t210;"
--- config
    location /t { idempotency main; }
--- must_die
--- error_log
idempotency store "main": a secret must be at least 16 bytes long
--- no_error_log
sekrit-t210
