# Redis entries after an operator's forget, and entries of another store:
# whoever can write Redis but lacks the secret may keep a signed entry
# and SET it back later, or copy it under another store's key.  A
# forgotten key's old entry put back is refused by the nginx that forgot
# it (its cache zone keeps a mark of the forgotten epoch), and the retry
# runs anew; an entry copied to another store (another table sharing the
# secret and the Redis) does not verify there; an entry of the previous
# format version, signed as that version signed, is a miss, not a replay.
# docs/design.md, "Redis entries and forget", says what the Redis tier
# cannot check without MySQL.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use Digest::SHA ();
use JSON::PP ();

our $T = 'keys_t215';
our $TB = 'keys_t215b';

for my $socket ($ENV{TEST_NGINX_MYSQL_SOCKET}) {
    sql_root($socket, "DROP TABLE IF EXISTS $T, $TB;"
                      . " CREATE TABLE $T LIKE idempotency_keys;"
                      . " CREATE TABLE $TB LIKE idempotency_keys");
}

our $R = $ENV{TEST_NGINX_REDIS_PORT};

# "main" with a cache zone, "other" on another table without one: both
# with the same Redis and the same secret
sub stores {
    return tier_stores(main => "cache=t215:1m redis=127.0.0.1:$R"
                               . " table=$T purge=off",
                       other => "redis=127.0.0.1:$R table=$TB purge=off");
}

sub locations {
    return IdemTest::orders_location(add_header => 'X-Idem X-Tier')
        . q{
    location = /other/orders {
        idempotency other;
        proxy_pass http://backend/orders;
        add_header X-Idem $idempotency_status always;
        add_header X-Tier $idempotency_tier always;
    }
    location = /admin {
        idempotency_admin main;
    }
};
}

sub order {
    my ($key, %a) = @_;
    return http_req(key => $key, body => 'x', %a);
}

sub count { IdemStress::backend_count($_[0]) }

# waits for the entry of $rk in Redis, and returns it
sub redis_entry {
    my ($rk) = @_;
    return IdemStress::wait_for("the entry $rk in Redis", 10, sub {
        redis_cmd($R, 'GET', $rk) });
}

add_block_preprocessor(sub {
    my $block = shift;

    $block->set_value('http_config', main::stores())
        unless defined $block->http_config;
    $block->set_value('config', main::locations())
        unless defined $block->config;
});

no_shuffle();
run_tests();

__DATA__

=== TEST 1: a forgotten key's old entry, SET back in Redis, is refused here: the retry runs anew
--- init
my $key = 't215-1';
my $rk = redis_key('main', '', $key);
redis_cmd($main::R, 'DEL', $rk);
my $r = main::order($key);
is("$r->{status} $r->{idem}", '201 new', 'executed');
my $old = main::redis_entry($rk);
my $j = main::admin('GET', "key=$key")->{json};
is("$j->{state} $j->{epoch}", 'completed 1', 'completed, epoch 1');
my $x = main::admin('POST', "action=forget&key=$key&version=$j->{version}");
is_deeply($x->{json}, { key_hash => key_hash_hex($key), action => 'forgotten',
                        was => 'completed', redis => 'sent' }, 'forgotten');
IdemStress::wait_for('the DEL', 10, sub {
    redis_cmd($main::R, 'EXISTS', $rk) == 0 });
# someone who can write Redis puts the signed entry back
redis_cmd($main::R, 'SET', $rk, $old, 'EX', '3600');
$r = main::order($key);
is("$r->{status} $r->{idem} $r->{tier}", '201 new mysql',
   'the entry put back is refused: the retry runs anew');
like($r->{body}, qr/"execution":2,/, '... its own response');
is(main::count($key), 2, 'run twice: once before the forget, once after');
like(main::error_log(), qr/\[warn\] .*redis=127\.0\.0\.1:\d+: value of key \Q${\ IdemStress::key_id($key)}\E ignored: an entry of an epoch an operator forgot here/,
     'a warning names the key');
is(main::admin('GET', "key=$key")->{json}{epoch}, 2, 'the new run: epoch 2');
--- request
POST /orders
x
--- more_headers
Idempotency-Key: t215-1
--- error_code: 201
--- response_headers
X-Idem: replay
X-Tier: shm
--- response_body_like: "execution":2,

=== TEST 2: an entry copied under another store's key (same secret, same Redis, another table) does not verify there
--- init
my $key = 't215-2';
my ($ra, $rb) = map { redis_key($_, '', $key) } qw(main other);
redis_cmd($main::R, 'DEL', $ra, $rb);
my $r = main::order($key);
is("$r->{status} $r->{idem}", '201 new', 'executed on main');
redis_cmd($main::R, 'SET', $rb, main::redis_entry($ra), 'EX', '3600');
$r = main::order($key, uri => '/other/orders');
is("$r->{status} $r->{idem} $r->{tier}", '201 new mysql',
   "main's entry is no replay for other: it runs there");
is(main::count($key), 2, 'once on each store');
like(main::error_log(), qr/value of key \Q${\ IdemStress::key_id($key)}\E ignored: not signed with this store's secret for this key/,
     'refused as not signed for it');
--- request
GET /__count?key=t215-2
--- config eval
main::locations() . q{
    location = /__count {
        proxy_pass http://backend;
    }
}
--- response_body chomp
2

=== TEST 3: an entry of the previous format (no epoch, a tag over the key hash and the entry), signed with the secret: a miss, without a warning
--- init
my $key = 't215-3';
my $rk = redis_key('main', '', $key);
my $rec = IdemTest::record(200, [['Content-Type', 'text/plain']],
                           "planted in format 1\n");
my $v1 = 'IDE' . pack('CCC3Q>a32N', 1, 1, 0, 0, 0, time + 3600,
                      pack('H64', fingerprint('POST', '/orders', 'x')),
                      length $rec) . $rec;
redis_cmd($main::R, 'SET', $rk, TierTest::signed('', $key, $v1), 'EX', '600');
my $r = main::order($key);
is("$r->{status} $r->{idem} $r->{tier}", '201 new mysql',
   'not replayed: the request runs');
is(main::count($key), 1, 'once');
unlike(main::error_log(), qr/ignored/, 'no warning');
IdemStress::wait_for('the completion\'s own entry over it', 10, sub {
    redis_cmd($main::R, 'GET', $rk) ne TierTest::signed('', $key, $v1) });
--- request
GET /admin?key=t215-3
--- response_body_like: "state":"completed","epoch":1,
