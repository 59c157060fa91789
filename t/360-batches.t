# Requests whose claims, reads and completions share statements
# (docs/design.md, "Batches"), and the claim that starts with its READ
# once most keys exist ("Which statement first"): what the clients see is
# what they see one at a time: every key executed once, duplicates
# replayed or told 409, and the server counted fewer statements than
# requests.

use lib 't';
use Test::Nginx::Socket;
use IdemTest;

IdemStress::begin_file('MYSQL_SOCKET');
plan 'no_plan';

# as root on the suite's server
sub root_sql { sql_root($ENV{TEST_NGINX_MYSQL_SOCKET}, @_) }

# the server's statement counters
sub counters {
    return IdemStress::server_status($ENV{TEST_NGINX_MYSQL_SOCKET},
                                     'Com_insert', 'Com_update');
}

our @KEYS = map { "t360-k$_" } 1 .. 32;
our %FIRST;     # key => the body of its first response

# the store behind a relay that holds every packet 20 ms: a round trip
# takes at least 40 ms, so requests that come together wait for the two
# connections (one worker) and share statements
our $OWNER = $$;
our $SLOW = tcp_proxy(IdemTest::extra_port(362),
                      $ENV{TEST_NGINX_MYSQL_PORT}, 0.02);
END { kill 'KILL', $SLOW if $SLOW && $$ == $OWNER }
$ENV{TEST_NGINX_SLOW_PORT} = IdemTest::extra_port(362);

# an account that may insert rows and complete them (its UPDATE reads
# key_hash and owner), but not read them: a claim's READ fails
my $db = $ENV{TEST_NGINX_MYSQL_DB};
root_sql("CREATE USER IF NOT EXISTS 'idem_noread'\@'127.0.0.1'"
         . " IDENTIFIED BY 'noread'");
root_sql("GRANT INSERT, UPDATE, DELETE ON $db.* TO"
         . " 'idem_noread'\@'127.0.0.1'");
root_sql("GRANT SELECT (key_hash, owner) ON $db.idempotency_keys TO"
         . " 'idem_noread'\@'127.0.0.1'");

# 64 requests at once, each with its upstream connection
worker_connections(1024);

# the log line of a block is in the log from its first request on
check_accum_error_log();

no_shuffle();
block_defaults(
    http_config => IdemTest::store_config(
        mysql => ['127.0.0.1:$TEST_NGINX_SLOW_PORT'], pool => 2,
        query_timeout => '10s') . <<'HTTP',
idempotency_store noread mysql=127.0.0.1:$TEST_NGINX_MYSQL_PORT
    user=idem_noread password=noread database=$TEST_NGINX_MYSQL_DB
    purge=off;
HTTP
    config => IdemTest::orders_location(add_header => 'X-Idem', count => 1)
              . IdemTest::location('/noread', idempotency => 'noread',
                                   idempotency_on_store_error => 'pass',
                                   proxy_pass => 'http://backend/orders',
                                   add_header => 'X-Idem'),
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: 32 new keys, each sent twice, all at once: every request gets 201 or 409, one of each key is forwarded, and claims and completions share statements
--- init
my $c0 = main::counters();
my @res = IdemStress::http_many(
    [ map { my $q = post_key('/orders?delay=500', $_, spec => 1);
            ($q, { %$q }) } @main::KEYS ], timeout => 60);
my $c1 = main::counters();

my %by;
$by{ idem_of($_) }++ for @res;
note('64 requests: ' . join ', ', map { "$_ x$by{$_}" } sort keys %by);

is(scalar(grep { !$_->{error} && ($_->{status} == 201
                                  || $_->{status} == 409) } @res),
   64, 'every request gets 201 or 409');
is($by{'201 new'} // 0, 32, 'one request of each key is forwarded');

for my $i (0 .. $#res) {
    $main::FIRST{ $main::KEYS[int($i / 2)] } = $res[$i]{body}
        if idem_of($res[$i]) eq '201 new';
}

my $ins = $c1->{Com_insert} - $c0->{Com_insert};
my $upd = $c1->{Com_update} - $c0->{Com_update};
note("claims of 64 requests: $ins INSERT statements; "
     . "32 completions: $upd UPDATE statements");
ok($ins < 32, "claims share INSERT statements ($ins for 64 requests)");
ok($upd < 32, "completions share UPDATE statements ($upd for 32)");
--- request eval
[map { "GET /count?key=t360-k$_" } 1 .. 32]
--- response_body eval
[("1") x 32]
--- timeout: 10



=== TEST 2: then each key is replayed, all at once, with the body of its first response
--- init
my @res = IdemStress::http_many(
    [ map { post_key('/orders?delay=500', $_, spec => 1) } @main::KEYS ],
    timeout => 60);
is(scalar(grep { idem_of($_) eq '201 replay' } @res), 32,
   'then each key is replayed');
is(scalar(grep { $res[$_]{body} ne ($main::FIRST{ $main::KEYS[$_] } // '') }
          0 .. $#main::KEYS),
   0, '... with the body of its first response');
--- more_headers
Idempotency-Key: t360-k1
--- request
POST /orders?delay=500
x
--- error_code: 201
--- response_headers
X-Idem: replay
--- response_body_like: ^\{"order_id":"ord-\d+","key":"t360-k1","execution":1,



=== TEST 3: most claims find their key (a claim starts with its READ): a new key after many duplicates is forwarded, then replayed, a different body is refused, and it ran once
--- init
IdemStress::http_many([ map { post_key('/orders', $main::KEYS[$_ % 32],
                                       spec => 1) } 1 .. 48 ],
                      timeout => 30);
--- more_headers
Idempotency-Key: t360-after
--- request eval
["POST /orders\nx", "POST /orders\nx", "POST /orders\ny",
 "GET /count?key=t360-after"]
--- error_code eval
[201, 201, 422, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: mismatch", ""]
--- response_body_like eval
['"execution":1,', '"execution":1,', '', '^1$']
--- timeout: 10



=== TEST 4: with idempotency_on_store_error pass, the claim of a key that exists fails after its INSERT was refused, and is still not forwarded: 503, executed once; the first request's write, still retried when nginx stops, is named as left
--- init
is(idem_of(post_key('/noread', 't360-noread')), '201 new',
   'pass: a new key is forwarded');
--- more_headers
Idempotency-Key: t360-noread
--- request eval
["POST /noread\nx", "GET /count?key=t360-noread"]
--- error_code eval
[503, 200]
--- response_body_like eval
['', '^1$']
--- error_log eval
qr/claim of key \Q${\ IdemStress::key_id('t360-noread')}\E failed: .*rejecting the request \(the key exists: never passed\)/
--- shutdown_error_log eval
qr/response of key \Q${\ IdemStress::key_id('t360-noread')}\E not stored: the process exits; the key stays in progress/
--- no_error_log
[alert]
[crit]
[emerg]
