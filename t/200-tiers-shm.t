# The shared-memory replay tier (idempotency_store ... cache=ZONE:SIZE):
# a replay served from the zone is the one MySQL serves, byte for byte;
# the fingerprint is still checked; only completed responses get there;
# the zone outlives a reload, never serves past retention and evicts when
# full; held duplicates are woken by the completion.  Two workers share
# the zone.  A completed key is in the zone by the time its client has the
# whole answer (read your writes): no block waits for it.
#
# The location /orders uses the store "main" (with the zone); a request
# with "X-Via: plain" is rewritten into /plain/, whose store "plain" has
# the same table but no tier: that is how a test gets the MySQL replay of
# the very same request (same URI, same fingerprint) to compare with.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use Time::HiRes ();

master_on();
workers(2);
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a zone replay is byte-identical to a MySQL replay
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t200:1m', plain => '')
--- config eval
IdemTest::orders_location(via => 'plain', add_header => 'X-Idem X-Tier')
. IdemTest::via_location('plain', add_header => 'X-Idem X-Tier')
--- init
my %q = (key => 't200-1', uri => '/orders?cookies=2', body => 'x');
my $r = http_req(%q);
is($r->{status}, 201, 'first request executed');
is($r->{tier}, 'mysql', 'first request claimed in MySQL');
my $m = http_req(%q, headers => ['X-Via: plain']);
is($m->{tier}, 'mysql', 'the store without tiers replays from MySQL');
my $s = http_req(%q);
is($s->{tier}, 'shm', 'the store with the zone replays from it');
is(strip_volatile($s->{raw}), strip_volatile($m->{raw}),
   'zone replay and MySQL replay are byte-identical');
like($s->{raw}, qr/\r\nIdempotent-Replayed: true\r\n/, 'marked as a replay');
--- more_headers
Idempotency-Key: t200-1
--- request
POST /orders?cookies=2
x
--- error_code: 201
--- response_headers
X-Idem: replay
X-Tier: shm
Idempotent-Replayed: true
Content-Type: application/json
--- raw_response_headers_like: Set-Cookie: c1=v1; Path=/\r\nSet-Cookie: c2=v2; Path=/\r\n
--- response_body_like: ^\{"order_id":"ord-\d+","key":"t200-1","execution":1,
--- error_log eval
"idempotency: key " . substr(IdemTest::key_hash_hex('t200-1'), 0, 8)
. " found in the cache zone"
--- no_error_log
[error]



=== TEST 2: a binary body comes back from the zone byte for byte
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t200:1m', plain => '')
--- config eval
IdemTest::orders_location(add_header => 'X-Tier')
--- init
my $r = http_req(key => 't200-2', uri => '/orders?binary=1', body => 'x');
is($r->{status}, 201, 'executed');
--- more_headers
Idempotency-Key: t200-2
--- request
POST /orders?binary=1
x
--- error_code: 201
--- response_headers
X-Tier: shm
Idempotent-Replayed: true
Content-Type: application/octet-stream
--- response_body eval
CORE::join('', map { chr($_) } 0..255, CORE::reverse(0..255)) . ("\0" x 64)
--- no_error_log
[error]



=== TEST 3: the fingerprint is checked against the zone entry: 422
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t200:1m', plain => '')
--- config eval
IdemTest::orders_location(add_header => 'X-Idem X-Tier', count => 1)
--- init
my $r = http_req(key => 't200-3', body => 'first body');
is($r->{status}, 201, 'executed');
--- more_headers eval
["Idempotency-Key: t200-3", "Idempotency-Key: t200-3", ""]
--- request eval
["POST /orders\nanother body", "POST /orders\nfirst body", "GET /count?key=t200-3"]
--- error_code eval
[422, 201, 200]
--- response_headers eval
["X-Idem: mismatch\nX-Tier: shm\nContent-Type: application/problem+json",
 "X-Idem: replay\nX-Tier: shm", ""]
--- response_body_like eval
['"type":"urn:ngx-idempotency:problem:key-reused"', '"execution":1', '^1$']
--- no_error_log
[error]



=== TEST 4: a replay that MySQL serves fills the zone
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t200:1m', plain => '')
--- config eval
IdemTest::orders_location(via => 'plain', add_header => 'X-Idem X-Tier')
. IdemTest::via_location('plain', add_header => 'X-Idem X-Tier')
--- init
# executed through the store without tiers: the zone knows nothing of it
my $r = http_req(key => 't200-4', body => 'x', headers => ['X-Via: plain']);
is($r->{status}, 201, 'executed');
--- more_headers
Idempotency-Key: t200-4
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: replay\nX-Tier: mysql", "X-Idem: replay\nX-Tier: shm"]
--- response_body_like eval
['"execution":1', '"execution":1']
--- no_error_log
[error]



=== TEST 5: $idempotency_tier: empty when the module did not act, mysql for a claim
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t200:1m')
--- config eval
IdemTest::orders_location(add_header => 'X-Idem X-Tier')
--- more_headers eval
["", "Idempotency-Key: t200-5"]
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: bypass\n!X-Tier", "X-Idem: new\nX-Tier: mysql"]
--- no_error_log
[error]



=== TEST 6: the zone survives a reload
# not under valgrind: nginx without a master process cannot reload (its
# new cycle never gets its listening sockets)
--- skip_eval: 8: $ENV{TEST_NGINX_USE_VALGRIND}
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t200:1m')
--- config eval
IdemTest::orders_location(add_header => 'X-Idem X-Tier')
--- init
my $r = http_req(key => 't200-6', body => 'x');
is($r->{status}, 201, 'executed');
is(http_req(key => 't200-6', body => 'x')->{tier}, 'shm', 'in the zone');
reload_nginx();
# only the zone can answer now
sql("DELETE FROM idempotency_keys WHERE key_hash = X'" . key_hash_hex('t200-6') . "'");
--- more_headers
Idempotency-Key: t200-6
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: replay
X-Tier: shm
Idempotent-Replayed: true
--- response_body_like: "key":"t200-6","execution":1,
--- error_log
reconfiguring
--- no_error_log
[error]



=== TEST 7: an entry is never served past the key's retention
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t200:1m query_timeout=300ms')
--- config eval
IdemTest::orders_location(idempotency_ttl => '3s', idempotency_lease => '1s',
    add_header => 'X-Idem X-Tier')
--- init
my $r = http_req(key => 't200-7', body => 'x');
is($r->{status}, 201, 'executed');
is(http_req(key => 't200-7', body => 'x')->{tier}, 'shm', 'in the zone');
# until the row's retention has ended: the zone's entry ends no later
IdemStress::wait_for('the retention of t200-7 to end', 10, sub {
    sql("SELECT expires_at <= UTC_TIMESTAMP(3) FROM idempotency_keys"
        . " WHERE key_hash = X'" . key_hash_hex('t200-7') . "'") eq "1\n" });
--- more_headers
Idempotency-Key: t200-7
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: new
X-Tier: mysql
!Idempotent-Replayed
--- response_body_like: "key":"t200-7","execution":2,
--- no_error_log
[error]



=== TEST 8: a full zone evicts the least recently used entry, not the oldest; requests never fail
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t200s:32k')
--- config eval
IdemTest::orders_location(add_header => 'X-Idem X-Tier')
--- init
# the zone holds only a few of these entries; "old" goes in first and
# is used again before every newer entry is stored, so the least
# recently used entry is always a newer one: LRU keeps "old" to the end,
# FIFO would push it out as soon as the zone is full
my %old = (key => 't200-8-old', uri => '/orders?size=6000', body => 'x');
is(http_req(%old)->{status}, 201, 'the oldest entry executed');
is(http_req(%old)->{tier}, 'shm', 'the oldest entry is in the zone at once');
for my $i (1 .. 8) {
    my %q = (key => "t200-8-$i", uri => '/orders?size=6000', body => 'x');
    is(http_req(%q)->{status}, 201, "key $i executed");
    my $r = http_req(%q);
    is($r->{tier}, 'shm', "key $i is in the zone at once");
    my $o = http_req(%old);
    is($o->{status}, 201, "the oldest entry answered after key $i");
    is($o->{tier}, 'shm', "the oldest entry, just used, is still in the zone after key $i");
}
# the zone did fill up: the least recently used entries were evicted, and
# their replays come from MySQL, whole
my $e = http_req(key => 't200-8-1', uri => '/orders?size=6000', body => 'x');
is($e->{status}, 201, 'an evicted key still answers');
is($e->{tier}, 'mysql', 'key 1, used least recently, was evicted');
is(length $e->{body}, 6000, 'its replay is complete');
# larger than a quarter of the zone: never cached, still replayed
my $big = http_req(key => 't200-8-big', uri => '/orders?size=20000', body => 'x');
is($big->{status}, 201, 'large response executed');
for (1 .. 2) {
    my $r = http_req(key => 't200-8-big', uri => '/orders?size=20000', body => 'x');
    is($r->{tier}, 'mysql', 'large response replayed from MySQL');
    is(length $r->{body}, 20000, 'large response complete');
}
--- more_headers
Idempotency-Key: t200-8-old
--- request
POST /orders?size=6000
x
--- error_code: 201
--- response_headers
X-Idem: replay
X-Tier: shm
--- response_body_like: ^[\x00-\xfa]{6000}$
--- no_error_log
[error]



=== TEST 9: an in-flight key is never cached
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t200:1m')
--- config eval
IdemTest::orders_location(idempotency_lease => '6s',
    add_header => 'X-Idem X-Tier')
--- init
my $pid = bg_request('POST', '/orders?delay=1500', 't200-9', 'x', 'claimed');
for (1 .. 2) {
    my $d = http_req(key => 't200-9', uri => '/orders?delay=1500', body => 'x');
    is($d->{status}, 409, 'in flight: 409');
    is($d->{tier}, 'mysql', 'in flight: decided by MySQL, not a tier');
}
# the owner's client has its whole answer: the zone has the entry
waitpid $pid, 0;
--- more_headers
Idempotency-Key: t200-9
--- request
POST /orders?delay=1500
x
--- error_code: 201
--- response_headers
X-Idem: replay
X-Tier: shm
--- response_body_like: "execution":1,
--- no_error_log
[error]



=== TEST 10: a held duplicate is woken by the completion, not by its next poll
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t200:1m')
--- config eval
IdemTest::orders_location(idempotency_wait => '5s',
    add_header => 'X-Idem X-Tier', count => 1)
--- init
# the owner answers 1.1 s after it started; the duplicate, held from
# 0.3 s, polls MySQL at +25, 75, 175, 375, 775 and 1275 ms: a poll would
# only see the completion at 1.275 s, the wakeup sees it at once
bg_request('POST', '/orders?delay=1100', 't200-10', 'x', 0.3);
my $d = http_req(key => 't200-10', uri => '/orders?delay=1100', body => 'x');
is($d->{status}, 201, 'held duplicate answered');
is($d->{idem}, 'replay', 'held duplicate replayed');
is($d->{tier}, 'shm', 'held duplicate served from the zone');
if (!$ENV{TEST_NGINX_USE_VALGRIND}) {
    cmp_ok($d->{elapsed}, '<', 1.1, 'no wait for the next poll');
}
--- more_headers eval
["", "Idempotency-Key: t200-10"]
--- request eval
["GET /count?key=t200-10", "POST /orders?delay=1100\nx"]
--- error_code eval
[200, 201]
--- response_body_like eval
['^1$', '"execution":1,']
--- response_headers eval
["", "X-Tier: shm"]
--- error_log eval
"key " . substr(IdemTest::key_hash_hex('t200-10'), 0, 8)
. " found in the cache zone"
--- no_error_log
[error]



=== TEST 11: fingerprints off: replayed from the zone, whatever the body
--- http_config eval
TierTest::tier_stores(main => 'cache=idem_t200:1m')
--- config eval
IdemTest::orders_location(idempotency_fingerprint => 'off',
    add_header => 'X-Idem X-Tier')
--- init
is(http_req(key => 't200-11', body => 'one body')->{status}, 201, 'executed');
--- more_headers
Idempotency-Key: t200-11
--- request eval
["POST /orders\nanother body", "POST /orders\nyet another"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: replay\nX-Tier: shm", "X-Idem: replay\nX-Tier: shm"]
--- response_body_like eval
['"execution":1,"method":"POST","uri":"/orders","body_bytes":8}',
 '"execution":1,"method":"POST","uri":"/orders","body_bytes":8}']
--- no_error_log
[error]



=== TEST 12: a zone smaller than 8 pages
--- http_config eval
TierTest::tier_stores(main => 'cache=tiny:8k')
--- config
    location /t { idempotency main; }
--- must_die
--- error_log
zone "tiny" of "idempotency_store" is too small



=== TEST 13: two stores cannot share a zone
--- http_config eval
TierTest::tier_stores(main => 'cache=shared:1m', other => 'cache=shared:1m')
--- config
    location /t { idempotency main; }
--- must_die
--- error_log
zone "shared" is already used by another "idempotency_store"



=== TEST 14: a zone needs a name and a size
--- http_config eval
TierTest::tier_stores(main => 'cache=1m')
--- config
    location /t { idempotency main; }
--- must_die
--- error_log
invalid "cache=1m" in "idempotency_store", it must be ZONE:SIZE
