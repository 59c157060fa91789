# idempotency_admin: the operator API.  A key's row by key (and scope) or
# by hash, in progress, completed, not stored, of unknown outcome or past
# retention; listings of the keys in progress and of unknown outcome,
# oldest first, bounded, over two shards; releasing a stuck or unknown key
# (the retry then runs once more: the backend counts) and forgetting a
# completed one (the cache zone and Redis let go of it too), each refused
# when the row is no longer the version the operator read; bad input,
# 404, 405, store failures; the notice lines and the counters; clients
# that leave while the store answers.
#
# The file has a table of its own (keys_t370 on both MariaDB servers),
# made anew when it starts, so that listings see only its rows.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use IO::Socket::INET ();
use JSON::PP ();
use Digest::SHA ();

our $T = 'keys_t370';
our $M1 = $ENV{TEST_NGINX_MYSQL_PORT};
our $M2 = $ENV{TEST_NGINX_MYSQL2_PORT}
    or die "TEST_NGINX_MYSQL2_PORT is not set: run with 'make test'\n";

for my $socket ($ENV{TEST_NGINX_MYSQL_SOCKET}, $ENV{TEST_NGINX_MYSQL2_SOCKET})
{
    sql_root($socket, "DROP TABLE IF EXISTS $T;"
                      . " CREATE TABLE $T LIKE idempotency_keys");
}

# keys of each of two shards
our (@S0, @S1);
for my $i (1 .. 60) {
    my $k = "t370-s$i";
    push @{ shard_of('', $k, 2) ? \@S1 : \@S0 }, $k;
}
die "no keys for both shards\n" unless @S0 >= 3 && @S1 >= 3;

our $DOWN = free_port();
our $SLOW = free_port();

sub admin_location {
    return q{
    location = /admin {
        idempotency_admin main;
    }
    location = /metrics {
        idempotency_metrics;
    }
};
}

sub store {
    return store_config(table => $T, purge => 'off', @_);
}

# a protected request, with headers
sub order {
    my ($key, %a) = @_;
    return http_req(key => $key, body => 'x', %a);
}

sub count { IdemStress::backend_count($_[0]) }

sub metric {
    my ($action) = @_;
    my $m = http_req(method => 'GET', uri => '/metrics')->{body};
    return IdemStress::metric($m, 'nginx_idempotency_operator_actions_total',
                              store => 'main', action => $action) // 0;
}

# a row made directly: what the module would have written, at a chosen
# time (state, created_at, lease: SQL for lease_until, expires)
sub put_row {
    my (%o) = @_;

    my $kh = $o{hash} // key_hash_hex($o{key}, $o{scope});
    my $fp = fingerprint('POST', '/orders', 'x');

    sql_at($o{port} // $M1,
           "INSERT INTO $T (key_hash, state, owner, epoch, fingerprint,"
           . " created_at, lease_until, expires_at) VALUES (X'$kh',"
           . " $o{state}, X'" . ('5a' x 16) . "', " . ($o{epoch} // 1)
           . ", X'$fp', " . ($o{created} ? "'$o{created}'" : 'UTC_TIMESTAMP(3)')
           . ", " . ($o{lease} // 'UTC_TIMESTAMP(3) - INTERVAL 1 SECOND')
           . ", " . ($o{expires} // 'UTC_TIMESTAMP(3) + INTERVAL 1 DAY')
           . ")");
}

sub hashes {
    my ($r) = @_;
    return [ map { $_->{key_hash} } @{ $r->{json}{keys} // [] } ];
}

# the request, then the connection closed before any answer
sub send_and_close {
    my ($req) = @_;

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => IdemTest::port())
        or die "connect: $!";
    print $s $req;
    select(undef, undef, undef, 0.2);
    close $s;
}

# another session that holds the row of key hash $kh (SELECT ... FOR
# UPDATE in an open transaction) until release_row()
sub hold_row {
    my ($kh) = @_;

    open my $fh, '|-', 'mariadb', '--no-defaults', '--batch',
         '--protocol=socket', "--socket=$ENV{TEST_NGINX_MYSQL_SOCKET}",
         '-u', 'root', $ENV{TEST_NGINX_MYSQL_DB}
        or die "mariadb: $!";
    my $old = select $fh; $| = 1; select $old;
    print $fh "BEGIN; SELECT state FROM $T WHERE key_hash = X'$kh'"
              . " FOR UPDATE;\n";
    IdemStress::wait_for('the row held', 10, sub {
        sql_root($ENV{TEST_NGINX_MYSQL_SOCKET},
                 "SELECT COUNT(*) FROM information_schema.INNODB_TRX"
                 . " WHERE trx_rows_locked > 0") ne "0\n" }, 0.1);
    return $fh;
}

sub release_row {
    my ($fh) = @_;
    print $fh "COMMIT;\n";
    close $fh;
}

# statements the server runs now that start with $text
sub running {
    my ($text) = @_;
    return 0 + sql_root($ENV{TEST_NGINX_MYSQL_SOCKET},
                        "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
                        . " WHERE INFO LIKE '$text%'");
}

our $TIME = qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

# the protected location and the operator's, unless a block says more
add_block_preprocessor(sub {
    my $block = shift;

    if (!defined $block->config) {
        $block->set_value('config',
                          orders_location(add_header => 'X-Idem X-Tier',
                                          count => 1)
                          . admin_location());
    }
});

no_shuffle();
run_tests();

__DATA__

=== TEST 1: a key in progress, by key and by hash; a stale version is refused while its owner renews
--- http_config eval
main::store(query_timeout => '500ms')
--- config eval
IdemTest::orders_location(idempotency_lease => '1500ms', count => 1)
. main::admin_location()
--- init
my $key = 't370-1';
my $pid = bg_request('POST', '/orders?delay=6000', $key, 'x', 0);
IdemStress::wait_for("$key upstream", 10, sub { main::count($key) == 1 });
my $r = main::admin('GET', "key=$key");
my $j = $r->{json};
is($r->{status}, 200, 'TEST 1: 200');
is($r->{headers}{'content-type'}[0], 'application/json', 'TEST 1: JSON');
is($j->{key_hash}, key_hash_hex($key), 'TEST 1: the key hash');
is($j->{state}, 'in_progress', 'TEST 1: in progress');
is($j->{epoch}, 1, 'TEST 1: epoch 1');
is($j->{status}, undef, 'TEST 1: no status yet');
is($j->{stored_bytes}, 0, 'TEST 1: nothing stored');
ok($j->{renewing}, 'TEST 1: its owner renews');
ok(!$j->{expired}, 'TEST 1: not expired');
like($j->{$_}, $main::TIME, "TEST 1: $_ in ISO 8601")
    for qw(created_at lease_until expires_at);
ok($j->{lease_until} gt $j->{created_at}, 'TEST 1: leased ahead');
like($j->{version}, qr/^0-1-[0-9A-F]{32}-\d{20}$/, 'TEST 1: its version');
is($j->{server}, "127.0.0.1:$main::M1", 'TEST 1: its server');
my $h = main::admin('GET', 'hash=' . uc key_hash_hex($key))->{json};
is_deeply([ @$h{qw(key_hash state created_at expires_at)} ],
          [ @$j{qw(key_hash state created_at expires_at)} ],
          'TEST 1: the same row by hash (upper-case hex too)');
# the owner renews its lease: the version the operator read goes stale
my $cur;
IdemStress::wait_for('a renewal', 15, sub {
    $cur = main::admin('GET', "key=$key")->{json};
    $cur->{version} ne $j->{version};
}, 0.1);
ok($cur->{lease_until} gt $j->{lease_until}, 'TEST 1: renewed');
my $x = main::admin('POST', "action=release&key=$key&version=$j->{version}");
is($x->{status}, 409, 'TEST 1: a stale version: 409');
is($x->{json}{type}, 'urn:ngx-idempotency:problem:key-changed',
   'TEST 1: ... key-changed');
is($x->{json}{current}{state}, 'in_progress', 'TEST 1: ... with the row');
ok($x->{json}{current}{renewing}, 'TEST 1: ... whose owner renews');
waitpid $pid, 0;
is(main::admin('GET', "key=$key")->{json}{state}, 'completed',
   'TEST 1: the owner completed it');
unlike(main::error_log(), qr/by an operator/, 'TEST 1: no change logged');
--- request
GET /count?key=t370-1
--- response_body chomp
1
--- no_error_log
[error]

=== TEST 2: completed, not stored, scoped, past retention; the key spelled as the header spells it; HEAD
--- http_config eval
main::store()
--- config eval
IdemTest::orders_location(idempotency_max_response_size => '10k')
. main::admin_location() . q{
    location /scoped {
        idempotency main;
        idempotency_scope $http_x_tenant;
        proxy_pass http://backend/orders;
    }
}
--- init
is(main::order('t370-2a')->{status}, 201, 'TEST 2: executed');
my $j = main::admin('GET', 'key=t370-2a')->{json};
is($j->{state}, 'completed', 'TEST 2: completed');
is($j->{status}, 201, 'TEST 2: status 201');
ok($j->{stored_bytes} > 0, 'TEST 2: stored');
ok(!$j->{renewing}, 'TEST 2: nobody renews');
ok(!$j->{expired}, 'TEST 2: within retention');
like($j->{version}, qr/^1-1-/, 'TEST 2: a version of state 1');
is(main::admin('GET', 'key=%22t370-2a%22')->{json}{key_hash}, $j->{key_hash},
   'TEST 2: the sf-String spelling is the same key');
is(main::order('t370 2 b')->{status}, 201, 'TEST 2: a key with spaces');
is(main::admin('GET', 'key=%20t370%202%20b%09')->{json}{key_hash},
   key_hash_hex('t370 2 b'), 'TEST 2: ... found, trimmed as the header is');
is(main::admin('GET', 'key=a+b')->{json}{key_hash}, key_hash_hex('a+b'),
   'TEST 2: "+" is a plus sign');
is(main::order('t370-2c', uri => '/orders?size=50000')->{status}, 201,
   'TEST 2: too large to store');
$j = main::admin('GET', 'key=t370-2c')->{json};
is($j->{state}, 'not_stored', 'TEST 2: not stored');
is($j->{status}, 201, 'TEST 2: ... its status known');
is($j->{stored_bytes}, 0, 'TEST 2: ... no bytes');
is(main::order('t370-2d', uri => '/scoped', headers => ['X-Tenant: acme'])
   ->{status}, 201, 'TEST 2: scoped');
is(main::admin('GET', 'key=t370-2d&scope=acme')->{json}{key_hash},
   key_hash_hex('t370-2d', 'acme'), 'TEST 2: found with its scope');
is(main::admin('GET', 'key=t370-2d')->{status}, 404,
   'TEST 2: not without it');
main::put_row(key => 't370-2e', state => 1,
              expires => 'UTC_TIMESTAMP(3) - INTERVAL 1 SECOND');
ok(main::admin('GET', 'key=t370-2e')->{json}{expired}, 'TEST 2: expired');
my $head = http_req(method => 'HEAD', uri => '/admin?key=t370-2a');
is($head->{status}, 200, 'TEST 2: HEAD');
is($head->{body}, '', 'TEST 2: ... without a body');
--- request
GET /admin?key=t370-2a
--- response_headers
Content-Type: application/json
Cache-Control: no-store
--- response_body_like: ^\{"key_hash":"[0-9a-f]{64}","state":"completed","epoch":1,"created_at":"[^"]+Z","lease_until":"[^"]+Z","expires_at":"[^"]+Z","status":201,"stored_bytes":\d+,"renewing":false,"expired":false,"version":"1-1-[0-9A-F]{32}-\d{20}","server":"127\.0\.0\.1:\d+"\}$
--- no_error_log
[error]

=== TEST 3: an unknown outcome: released on its version, the retry runs once more; the notice line; the counter
--- http_config eval
main::store()
--- init
my $key = 't370-3';
my $kh = key_hash_hex($key);
my $id = substr($kh, 0, 8);
is(main::order($key)->{status}, 201, 'TEST 3: executed');
# the module's own marking of unknown outcomes comes separately: the row
# is made one here
sql("UPDATE $main::T SET state = 3, status = NULL, response = NULL"
    . " WHERE key_hash = X'$kh'");
my $j = main::admin('GET', "key=$key")->{json};
is($j->{state}, 'unknown', 'TEST 3: unknown');
ok(!$j->{renewing}, 'TEST 3: nobody renews it');
like($j->{version}, qr/^3-1-/, 'TEST 3: a version of state 3');
my $r = main::order($key);
is($r->{status}, 502, 'TEST 3: a retry is not run: 502');
is($r->{headers}{'content-type'}[0], 'application/problem+json',
   'TEST 3: ... problem+json');
my $p = JSON::PP::decode_json($r->{body});
is_deeply([ @$p{qw(type title status)} ],
          [ 'urn:ngx-idempotency:problem:outcome-unknown', 'Outcome unknown',
            502 ], 'TEST 3: ... outcome-unknown');
is(main::count($key), 1, 'TEST 3: ... executed once');
my $f = main::admin('POST', "action=forget&key=$key&version=$j->{version}");
is($f->{status}, 409, 'TEST 3: forget: 409');
is($f->{json}{type}, 'urn:ngx-idempotency:problem:action-not-applicable',
   'TEST 3: ... action-not-applicable');
like($f->{json}{detail}, qr/^The key's state is unknown: forget applies to keys that ran \(completed, not stored, executed\)\.  To let a retry run again, use action=release\.$/,
     'TEST 3: ... release applies');
is($f->{json}{current}{state}, 'unknown', 'TEST 3: ... with the row');
my $before = main::metric('release');
my $x = main::admin('POST', "action=release&key=$key&version=$j->{version}");
is($x->{status}, 200, 'TEST 3: released');
is_deeply($x->{json}, { key_hash => $kh, action => 'released',
                        was => 'unknown' }, 'TEST 3: ... the answer');
is(main::metric('release') - $before, 1, 'TEST 3: counted');
like(main::error_log(), qr/\[notice\] .*idempotency store "main": key \Q$id\E released by an operator \(was unknown; key hash \Q$kh\E; client 127\.0\.0\.1\)/,
     'TEST 3: the notice line');
is(main::admin('GET', "key=$key")->{json}{state}, 'released',
   'TEST 3: given back (released, its epoch kept)');
$r = main::order($key);
is("$r->{status} $r->{idem}", '201 new', 'TEST 3: the retry runs anew');
$x = main::admin('POST', "action=release&key=$key&version=$j->{version}");
is($x->{status}, 409, 'TEST 3: released again: 409');
like($x->{json}{detail}, qr/^The key's state is completed: release applies .*use action=forget\.$/,
     'TEST 3: ... it is completed now: forget applies');
--- request
GET /count?key=t370-3
--- response_body chomp
2

=== TEST 4: stuck in progress, whether its lease runs or not: released, the retry runs
--- http_config eval
main::store()
--- init
# an owner that died with a long lease: its lease runs, nobody renews it
main::put_row(key => 't370-4a', state => 0,
              lease => 'UTC_TIMESTAMP(3) + INTERVAL 1 HOUR');
my $j = main::admin('GET', 'key=t370-4a')->{json};
ok($j->{renewing}, 'TEST 4: a lease that runs looks renewed');
is(main::order('t370-4a')->{status}, 409, 'TEST 4: a retry gets 409');
my $j2 = main::admin('GET', 'key=t370-4a')->{json};
is($j2->{version}, $j->{version}, 'TEST 4: ... and the version stays');
my $x = main::admin('POST', "action=release&key=t370-4a&version=$j->{version}");
is_deeply($x->{json}, { key_hash => key_hash_hex('t370-4a'),
                        action => 'released', was => 'in_progress' },
          'TEST 4: released');
my $r = main::order('t370-4a');
is("$r->{status} $r->{idem}", '201 new', 'TEST 4: the retry runs');
# another key, its lease ended
main::put_row(key => 't370-4b', state => 0, epoch => 4);
$j = main::admin('GET', 'key=t370-4b')->{json};
ok(!$j->{renewing}, 'TEST 4: a lease that ended: not renewing');
is($j->{epoch}, 4, 'TEST 4: its epoch');
like($j->{version}, qr/^0-4-(5A){16}-\d{20}$/, 'TEST 4: its version');
$x = main::admin('POST', "action=release&hash=" . key_hash_hex('t370-4b')
                 . "&version=$j->{version}");
is($x->{json}{action}, 'released', 'TEST 4: released by hash');
like(main::error_log(), qr/key \Q${\ substr(key_hash_hex('t370-4b'), 0, 8)}\E released by an operator \(was in_progress;/,
     'TEST 4: the notice line');
--- request
GET /count?key=t370-4a
--- response_body chomp
1

=== TEST 5: listings: oldest first, bounded, truncated; never the purge lease; HEAD
--- http_config eval
main::store()
--- config eval
main::admin_location()
--- init
sql("DELETE FROM $main::T");
main::put_row(hash => '0' x 64, state => 0, created => '2000-01-01',
              expires => "'9999-12-31'");
main::put_row(key => 't370-5p3', state => 0, created => '2026-01-01 00:00:03');
main::put_row(key => 't370-5p1', state => 0, created => '2026-01-01 00:00:01');
main::put_row(key => 't370-5u2', state => 3, created => '2026-01-01 00:00:02.5');
main::put_row(key => 't370-5p2', state => 0, created => '2026-01-01 00:00:02');
main::put_row(key => 't370-5u1', state => 3, created => '2026-01-01 00:00:01.5');
main::put_row(key => 't370-5c', state => 1, created => '2025-01-01');
my @p = map { key_hash_hex("t370-5p$_") } 1 .. 3;
my @u = map { key_hash_hex("t370-5u$_") } 1 .. 2;
my $r = main::admin('GET', 'list=in_progress');
is($r->{status}, 200, 'TEST 5: 200');
is_deeply(main::hashes($r), \@p, 'TEST 5: in progress, oldest first');
is($r->{json}{limit}, 100, 'TEST 5: the default limit');
ok(!$r->{json}{truncated}, 'TEST 5: all of them');
is($r->{json}{keys}[0]{created_at}, '2026-01-01T00:00:01.000Z',
   'TEST 5: its time');
is_deeply([ sort keys %{ $r->{json}{keys}[0] } ],
          [ sort qw(key_hash state epoch created_at lease_until expires_at
                    status stored_bytes renewing expired version server) ],
          'TEST 5: rows as GET shows them');
$r = main::admin('GET', 'list=in_progress&limit=2');
is_deeply(main::hashes($r), [ @p[0, 1] ], 'TEST 5: limit=2: the two oldest');
ok($r->{json}{truncated}, 'TEST 5: ... truncated');
is($r->{json}{limit}, 2, 'TEST 5: ... the limit');
ok(!main::admin('GET', 'list=in_progress&limit=3')->{json}{truncated},
   'TEST 5: limit=3: not truncated');
$r = main::admin('GET', 'list=unknown');
is_deeply(main::hashes($r), \@u, 'TEST 5: unknown, oldest first');
is($r->{json}{keys}[1]{created_at}, '2026-01-01T00:00:02.500Z',
   'TEST 5: milliseconds');
$r = main::admin('GET', 'list=unknown&limit=1000');
is(scalar @{ $r->{json}{keys} }, 2, 'TEST 5: limit=1000');
sql("DELETE FROM $main::T WHERE state = 3");
$r = main::admin('GET', 'list=unknown');
is_deeply($r->{json}, { keys => [], limit => 100,
                        truncated => JSON::PP::false }, 'TEST 5: none');
$r = http_req(method => 'HEAD', uri => '/admin?list=in_progress');
is("$r->{status} $r->{body}", '200 ', 'TEST 5: HEAD');
--- request
GET /admin?list=in_progress&limit=1
--- response_headers
Content-Type: application/json
--- response_body_like: ^\{"keys":\[\{"key_hash":"[0-9a-f]{64}","state":"in_progress",.*\}\],"limit":1,"truncated":true\}$
--- no_error_log
[error]

=== TEST 6: forget a completed key: the cache zone and Redis let go of it, the retry runs again
--- http_config eval
TierTest::tier_stores(main => "cache=t370:1m redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT} table=$main::T purge=off")
--- init
my $key = 't370-6';
my $kh = key_hash_hex($key);
my $rk = redis_key('main', '', $key);
redis_cmd($ENV{TEST_NGINX_REDIS_PORT}, 'DEL', $rk);
is(main::order($key)->{status}, 201, 'TEST 6: executed');
my $r = wait_for_tier('shm', 10, key => $key, body => 'x');
is("$r->{status} $r->{tier}", '201 shm', 'TEST 6: replayed by the zone');
IdemStress::wait_for('the entry in Redis', 10, sub {
    redis_cmd($ENV{TEST_NGINX_REDIS_PORT}, 'EXISTS', $rk) == 1
});
my $j = main::admin('GET', "key=$key")->{json};
my $x = main::admin('POST', "action=release&key=$key&version=$j->{version}");
is($x->{status}, 409, 'TEST 6: release: 409');
like($x->{json}{detail}, qr/use action=forget/, 'TEST 6: ... forget applies');
my $before = main::metric('forget');
$x = main::admin('POST', "action=forget&key=$key&version=$j->{version}");
is($x->{status}, 200, 'TEST 6: forgotten');
is_deeply($x->{json}, { key_hash => $kh, action => 'forgotten',
                        was => 'completed', redis => 'sent' },
          'TEST 6: ... the answer');
is(main::metric('forget') - $before, 1, 'TEST 6: counted');
IdemStress::wait_for('the entry gone from Redis', 10, sub {
    redis_cmd($ENV{TEST_NGINX_REDIS_PORT}, 'EXISTS', $rk) == 0
});
$r = main::order($key);
is("$r->{status} $r->{idem} $r->{tier}", '201 new mysql',
   'TEST 6: the retry runs anew');
like(main::error_log(), qr/\[notice\] .*key \Q${\ substr($kh, 0, 8)}\E forgotten by an operator \(was completed; key hash \Q$kh\E; client 127\.0\.0\.1\)/,
     'TEST 6: the notice line');
$x = main::admin('POST', "action=forget&key=$key&version=$j->{version}");
is($x->{status}, 409, 'TEST 6: forgotten again, an old version: 409');
is($x->{json}{type}, 'urn:ngx-idempotency:problem:key-changed',
   'TEST 6: ... key-changed');
# another nginx forgot a key this one has in its zone: the row is gone,
# the zone still replays it; the same call here (404) drops the copy
my $k2 = 't370-6b';
is(main::order($k2)->{status}, 201, 'TEST 6: another key executed');
$r = wait_for_tier('shm', 10, key => $k2, body => 'x');
$j = main::admin('GET', "key=$k2")->{json};
sql("DELETE FROM $main::T WHERE key_hash = X'" . key_hash_hex($k2) . "'");
is(main::order($k2)->{tier}, 'shm', 'TEST 6: its row gone, the zone replays');
$x = main::admin('POST', "action=forget&key=$k2&version=$j->{version}");
is($x->{status}, 404, 'TEST 6: forget here: 404');
$r = main::order($k2);
is("$r->{status} $r->{idem} $r->{tier}", '201 new mysql',
   'TEST 6: ... and the zone let go of it');
is(main::count($k2), 2, 'TEST 6: ... so the retry ran');
--- request
GET /count?key=t370-6
--- response_body chomp
2
--- no_error_log
[error]

=== TEST 7: forget while Redis is down: the answer and a warning say the DEL was not sent
--- http_config eval
TierTest::tier_stores(main => "redis=127.0.0.1:$main::DOWN table=$main::T purge=off")
--- init
is(main::order('t370-7')->{status}, 201, 'TEST 7: executed');
my $j = main::admin('GET', 'key=t370-7')->{json};
my $x = main::admin('POST', "action=forget&key=t370-7&version=$j->{version}");
is($x->{status}, 200, 'TEST 7: forgotten');
is($x->{json}{redis}, 'not_sent', 'TEST 7: ... the DEL not sent');
like(main::error_log(), qr/\[warn\] .*idempotency store "main" redis=127\.0\.0\.1:\d+: DEL of key \Q${\ substr(key_hash_hex('t370-7'), 0, 8)}\E not sent \(Redis is down\)/,
     'TEST 7: ... and the warning');
--- request
GET /count?key=t370-7
--- response_body chomp
1

=== TEST 8: two shards: a key's row on its shard, listings merged, a release on the second shard
--- http_config eval
"idempotency_store main mysql=127.0.0.1:$main::M1 mysql=127.0.0.1:$main::M2"
. " user=\$TEST_NGINX_MYSQL_USER password=\$TEST_NGINX_MYSQL_PASSWORD"
. " database=\$TEST_NGINX_MYSQL_DB table=$main::T purge=off;\n"
. "upstream backend { server 127.0.0.1:\$TEST_NGINX_BACKEND_PORT; }\n"
--- init
sql_at($_, "DELETE FROM $main::T") for $main::M1, $main::M2;
my ($a0, $b0) = @main::S0;
my ($a1, $b1) = @main::S1;
main::put_row(key => $a1, state => 3, port => $main::M2,
              created => '2026-01-01 00:00:01');
main::put_row(key => $a0, state => 3, port => $main::M1,
              created => '2026-01-01 00:00:02');
main::put_row(key => $b1, state => 3, port => $main::M2,
              created => '2026-01-01 00:00:03');
main::put_row(key => $b0, state => 3, port => $main::M1,
              created => '2026-01-01 00:00:04');
main::put_row(key => $main::S0[2], state => 0, port => $main::M1);
my $r = main::admin('GET', 'list=unknown');
is_deeply(main::hashes($r), [ map { key_hash_hex($_) } $a1, $a0, $b1, $b0 ],
          'TEST 8: both shards, oldest first');
is_deeply([ map { $_->{server} } @{ $r->{json}{keys} } ],
          [ map { "127.0.0.1:$_" } $main::M2, $main::M1, $main::M2, $main::M1 ],
          'TEST 8: each from its server');
$r = main::admin('GET', 'list=unknown&limit=3');
is_deeply(main::hashes($r), [ map { key_hash_hex($_) } $a1, $a0, $b1 ],
          'TEST 8: limit=3');
ok($r->{json}{truncated}, 'TEST 8: ... truncated');
$r = main::admin('GET', 'list=in_progress&limit=1');
is_deeply(main::hashes($r), [ key_hash_hex($main::S0[2]) ],
          'TEST 8: in progress: the one');
ok(!$r->{json}{truncated}, 'TEST 8: ... all of them');
my $j = main::admin('GET', "key=$b1")->{json};
is($j->{server}, "127.0.0.1:$main::M2", 'TEST 8: a key on the second shard');
my $x = main::admin('POST', "action=release&key=$b1&version=$j->{version}");
is($x->{json}{action}, 'released', 'TEST 8: released');
is(sql_at($main::M2, "SELECT COUNT(*) FROM $main::T WHERE key_hash = X'"
                     . key_hash_hex($b1) . "' AND state = 4"),
   "1\n", 'TEST 8: ... on the second server');
is(main::order($b1)->{status}, 201, 'TEST 8: the retry runs');
is(main::count($b1), 1, 'TEST 8: ... once');
is(scalar @{ main::admin('GET', 'list=unknown')->{json}{keys} }, 3,
   'TEST 8: three left');
--- request
GET /admin?list=unknown&limit=3
--- response_body_like: ^\{"keys":\[\{"key_hash":"[0-9a-f]{64}","state":"unknown",[^\]]*\},\{[^\]]*"state":"unknown",[^\]]*\},\{[^\]]*"state":"unknown",[^\]]*\}\],"limit":3,"truncated":false\}$
--- no_error_log
[error]

=== TEST 9: bad input: 400 with what is wrong; 404; 405
--- http_config eval
main::store()
--- config eval
main::admin_location()
--- init
my $h = key_hash_hex('t370-9');
my $type = 'urn:ngx-idempotency:problem:admin-bad-request';
my @bad = (
    [ GET => '', qr/^no arguments: give hash=, key= or list=$/ ],
    [ GET => 'foo=1', qr/^unknown argument "foo"$/ ],
    [ GET => '%FF=1', qr/^an unknown argument$/ ],
    [ GET => 'key=a&key=b', qr/^key= is given twice$/ ],
    [ GET => "hash=$h&key=a", qr/^hash= and key= together: give one$/ ],
    [ GET => 'hash=abc', qr/^hash= is 64 hex digits$/ ],
    [ GET => 'hash=' . ('z' x 64), qr/^hash= is 64 hex digits$/ ],
    [ GET => 'hash=' . ('0' x 64), qr/purge lease's row, not a key/ ],
    [ GET => 'scope=t', qr/^scope= goes with key=$/ ],
    [ GET => 'key=', qr/^key=: the key is empty$/ ],
    [ GET => 'key=%20%20', qr/^key=: the key is empty$/ ],
    [ GET => 'key=a%01b', qr/^key=: the key has a byte that is not printable ASCII$/ ],
    [ GET => 'key=%C3%A9', qr/not printable ASCII/ ],
    [ GET => 'key=%22abc', qr/^key=: the quoted key has no closing quote$/ ],
    [ GET => 'key=%22a%5Cb%22', qr/^key=: the quoted key has an escape other than \\" or \\\\$/ ],
    [ GET => 'key=' . ('k' x 256), qr/^key=: the key is longer than 255 bytes$/ ],
    [ GET => 'key=a%zz', qr/^key= has a "%" not followed by two hex digits$/ ],
    [ GET => 'key=a%4', qr/not followed by two hex digits/ ],
    [ GET => 'key=a&action=release', qr/^action= is sent with POST$/ ],
    [ GET => 'key=a&version=0-1', qr/^version= goes with action=$/ ],
    [ GET => 'key=a&limit=5', qr/^limit= goes with list=$/ ],
    [ GET => 'list=done', qr/^list= is in_progress or unknown$/ ],
    [ GET => 'list=unknown&limit=0', qr/^limit= is a number from 1 to 1000$/ ],
    [ GET => 'list=unknown&limit=1001', qr/^limit= is a number from 1 to 1000$/ ],
    [ GET => 'list=unknown&limit=x', qr/limit= is a number/ ],
    [ GET => 'list=unknown&limit=-1', qr/limit= is a number/ ],
    [ GET => 'list=unknown&key=a', qr/^list= takes no other argument than limit=$/ ],
    [ POST => 'list=unknown', qr/^list= is read with GET$/ ],
    [ POST => 'key=a', qr/^a POST needs action=release or action=forget$/ ],
    [ POST => 'key=a&action=purge&version=1', qr/^action= is release or forget$/ ],
    [ POST => 'key=a&action=release', qr/^action= needs version=/ ],
    [ POST => 'key=a&action=release&version=', qr/^version= is not a version/ ],
    [ POST => 'key=a&action=forget&version=0-1-abc', qr/^version= is not a version/ ],
    [ POST => "key=a&action=forget&version=1'%20OR%201=1", qr/^version= is not a version/ ],
    [ POST => 'key=a&action=forget&version=' . ('1' x 81), qr/^version= is not a version/ ],
    [ POST => 'action=release&version=0-1', qr/^give hash=, key= or list=$/ ],
);
for my $b (@bad) {
    my ($m, $args, $detail) = @$b;
    my $r = main::admin($m, $args);
    is($r->{status}, 400, "TEST 9: $m ?$args: 400");
    is($r->{headers}{'content-type'}[0], 'application/problem+json',
       "TEST 9: ... problem+json");
    is($r->{json}{type}, $type, "TEST 9: ... admin-bad-request");
    like($r->{json}{detail} // '', $detail, "TEST 9: ... $detail");
}
for my $m (qw(GET POST)) {
    my $r = main::admin($m, 'key=a' . ($m eq 'POST' ? '&action=release&version=0-1' : ''),
                        body => 'x');
    is($r->{status}, 400, "TEST 9: $m with a body: 400");
    like($r->{json}{detail}, qr/the request body must be empty/,
         'TEST 9: ... the body must be empty');
}
my $r = main::admin('GET', 'key=t370-9');
is($r->{status}, 404, 'TEST 9: an absent key: 404');
is($r->{json}{type}, 'urn:ngx-idempotency:problem:key-not-found',
   'TEST 9: ... key-not-found');
is($r->{json}{key_hash}, $h, 'TEST 9: ... naming its hash');
$r = main::admin('POST', 'action=release&key=t370-9&version=0-1-00-0');
is($r->{status}, 404, 'TEST 9: releasing an absent key: 404');
$r = main::admin('POST', 'action=forget&hash=' . uc($h) . '&version=1-1-00-0');
is($r->{status}, 404, 'TEST 9: forgetting one by hash: 404');
for my $m (qw(PUT DELETE PATCH OPTIONS)) {
    $r = main::admin($m, 'key=a');
    is($r->{status}, 405, "TEST 9: $m: 405");
    is($r->{headers}{allow}[0], 'GET, HEAD, POST', 'TEST 9: ... Allow');
}
--- request
DELETE /admin?key=a
--- error_code: 405
--- response_headers
Allow: GET, HEAD, POST
Content-Type: application/problem+json
--- response_body_like: "type":"urn:ngx-idempotency:problem:admin-method-not-allowed"
--- no_error_log
[error]

=== TEST 10: the store fails: 503 and an error line
--- http_config
    idempotency_store main mysql=127.0.0.1:1 user=$TEST_NGINX_MYSQL_USER password=$TEST_NGINX_MYSQL_PASSWORD database=$TEST_NGINX_MYSQL_DB purge=off;
--- config eval
main::admin_location()
--- init
my $r = main::admin('GET', 'list=unknown');
is($r->{status}, 503, 'TEST 10: a listing: 503');
is($r->{json}{type}, 'urn:ngx-idempotency:problem:store-unavailable',
   'TEST 10: ... store-unavailable');
like($r->{json}{detail}, qr/^The store failed \(mysql=127\.0\.0\.1:1: /,
     'TEST 10: ... naming the server');
$r = main::admin('POST', 'action=release&key=a&version=0-1');
is($r->{status}, 503, 'TEST 10: a release: 503');
like($r->{json}{detail}, qr/the change may or may not have been made/,
     'TEST 10: ... it may have been made');
like(main::error_log(), qr/\[error\] .*idempotency store "main" mysql=127\.0\.0\.1:1: admin release failed: .*\(client 127\.0\.0\.1\)/,
     'TEST 10: the error line');
--- request
GET /admin?key=a
--- error_code: 503
--- error_log eval
qr/\[error\] .*admin show failed/

=== TEST 11: clients that leave while the store answers: a read is let go, a change is still made and logged
--- http_config eval
main::store(query_timeout => '5s', pool => 1)
. "idempotency_store slow mysql=127.0.0.1:$main::SLOW"
. " user=\$TEST_NGINX_MYSQL_USER password=\$TEST_NGINX_MYSQL_PASSWORD"
. " database=\$TEST_NGINX_MYSQL_DB table=$main::T purge=off"
. " query_timeout=10s connect_timeout=10s;\n"
--- config eval
main::admin_location() . q{
    location = /slow {
        idempotency_admin slow;
    }
}
--- init
$main::relay = tcp_proxy($main::SLOW, $main::M1, 0.3);
main::put_row(key => 't370-11', state => 3);
my $j = main::admin('GET', 'key=t370-11')->{json};
main::send_and_close("GET /slow?list=unknown HTTP/1.1\r\nHost: x\r\n\r\n");
# let go of: it ends on its own, and only a timeout would be acted on
IdemStress::wait_for('the listing, let go of', 20, sub {
    main::error_log() =~ /admin list finished: rc=0 err=0/
}, 0.2);
main::send_and_close("POST /slow?action=release&key=t370-11&version="
                     . "$j->{version} HTTP/1.1\r\nHost: x\r\n"
                     . "Content-Length: 0\r\n\r\n");
IdemStress::wait_for('the release', 20, sub {
    main::error_log() =~ /key \Q${\ substr(key_hash_hex('t370-11'), 0, 8)}\E released by an operator \(was unknown; .*client 127\.0\.0\.1\)/
}, 0.2);
is(main::admin('GET', 'key=t370-11')->{json}{state}, 'released',
   'TEST 11: released');
kill 'KILL', $main::relay;
waitpid $main::relay, 0;
--- request
GET /admin?list=unknown
--- response_body_like: ^\{"keys":\[.*\],"limit":100,"truncated":false\}$
--- no_error_log
[error]

=== TEST 12: an if block inside the location answers as the location does
--- http_config eval
main::store()
--- config
    location = /admin {
        idempotency_admin main;
        if ($arg_list) {
            add_header X-If yes;
        }
    }
--- init
sql("DELETE FROM $main::T");
--- request
GET /admin?list=unknown
--- error_code: 200
--- response_headers
X-If: yes
Content-Type: application/json
--- response_body
{"keys":[],"limit":100,"truncated":false}

=== TEST 13: a change past query_timeout is ended on the server (KILL QUERY): a release that waited for a row lock is not made behind the operator's back
--- http_config eval
main::store(query_timeout => '300ms')
--- config eval
main::admin_location()
--- init
my $key = 't370-13';
my $kh = key_hash_hex($key);
main::put_row(key => $key, state => 3);
my $j = main::admin('GET', "key=$key")->{json};
# another session holds the row: the release's UPDATE waits for it
my $holder = main::hold_row($kh);
my $x = main::admin('POST', "action=release&key=$key&version=$j->{version}");
is($x->{status}, 503, 'TEST 13: the release timed out: 503');
is($x->{json}{type}, 'urn:ngx-idempotency:problem:store-unavailable',
   'TEST 13: ... store-unavailable');
is($x->{json}{detail}, "The store failed (mysql=127.0.0.1:$main::M1: timed "
                       . "out): the change may or may not have been made; "
                       . "read the key again.", 'TEST 13: ... its detail');
# while the row is still held, the server no longer runs the UPDATE
IdemStress::wait_for('the UPDATE ended on the server', 10, sub {
    main::running("UPDATE `$main::T`") == 0 });
like(main::error_log(), qr/\[notice\] .*idempotency store "main" mysql=127\.0\.0\.1:\d+: admin release given up on, thread id \d+ sent KILL QUERY/,
     'TEST 13: the notice line');
main::release_row($holder);
my $now = main::admin('GET', "key=$key")->{json};
is_deeply([ @$now{qw(state version expired)} ],
          [ 'unknown', $j->{version}, JSON::PP::false ],
          'TEST 13: the row is as the operator read it');
--- request
GET /admin?key=t370-13
--- response_body_like: ^\{"key_hash":"[0-9a-f]{64}","state":"unknown",.*"expired":false,
--- error_log eval
qr/\[error\] .*mysql=127\.0\.0\.1:\d+: admin release failed: timed out \(client 127\.0\.0\.1\)/

=== TEST 14: the default schema's index (ix_state_created): a listing on a table of many rows reads only the rows of its state, in the index's order: no scan, no sort
--- http_config eval
main::store()
--- config eval
main::admin_location()
--- init
my $sock = $ENV{TEST_NGINX_MYSQL_SOCKET};
sql("DELETE FROM $main::T");
like(sql_root($sock, "SHOW CREATE TABLE $main::T"),
     qr/KEY `ix_state_created` \(`state`,`created_at`,`key_hash`\)/,
     "TEST 14: the table (LIKE idempotency_keys) has the index");
# 20 000 completed keys, one in a thousand of unknown outcome, a second
# apart, inserted newest first
sql_root($sock, "INSERT INTO $main::T (key_hash, state, owner, epoch,"
    . " fingerprint, created_at, lease_until, expires_at)"
    . " SELECT UNHEX(SHA2(CONCAT('t370-14-', seq), 256)),"
    . " IF(seq % 1000 = 0, 3, 1), X'" . ('5a' x 16) . "', 1, X'"
    . ('00' x 32) . "', '2026-01-01' + INTERVAL (20001 - seq) SECOND,"
    . " '2026-01-01', UTC_TIMESTAMP(3) + INTERVAL 1 DAY"
    . " FROM seq_1_to_20000");
my @c = qw(Handler_read_rnd_next Handler_read_next Sort_rows Sort_scan
           Sort_range);
my $s0 = IdemStress::server_status($sock, @c);
my $r = main::admin('GET', 'list=unknown&limit=5');
my $s1 = IdemStress::server_status($sock, @c);
is($r->{status}, 200, 'TEST 14: 200');
my $sha = sub { Digest::SHA::sha256_hex("t370-14-$_[0]") };
is_deeply(main::hashes($r), [ map { $sha->(1000 * $_) } reverse 16 .. 20 ],
          'TEST 14: the five oldest of unknown outcome');
ok($r->{json}{truncated}, 'TEST 14: ... truncated');
my %d = map { $_ => $s1->{$_} - $s0->{$_} } @c;
is("$d{Sort_rows} $d{Sort_scan} $d{Sort_range}", '0 0 0',
   'TEST 14: nothing sorted');
cmp_ok($d{Handler_read_rnd_next} + $d{Handler_read_next}, '<', 2000,
       'TEST 14: a few rows read, not 20 000');
--- request
GET /admin?list=in_progress
--- response_body
{"keys":[],"limit":100,"truncated":false}
--- no_error_log
[error]

=== TEST 14b: a table made by the previous schema (no ix_state_created, rows clustered by key_hash): the same answer, by a scan and a sort
--- http_config eval
main::store()
--- config eval
main::admin_location()
--- init
my $sock = $ENV{TEST_NGINX_MYSQL_SOCKET};
# the previous schema's keys (t/316-upgrade.t has its CREATE TABLE)
sql_root($sock, "ALTER TABLE $main::T DROP PRIMARY KEY,"
    . " ADD PRIMARY KEY (key_hash), DROP KEY uk_key_hash,"
    . " DROP KEY ix_state_created, ADD KEY ix_expires_at (expires_at)");
unlike(sql_root($sock, "SHOW CREATE TABLE $main::T"), qr/ix_state_created/,
       'TEST 14b: no listing index');
my @c = qw(Sort_rows);
my $s0 = IdemStress::server_status($sock, @c);
my $r = main::admin('GET', 'list=unknown&limit=5');
my $s1 = IdemStress::server_status($sock, @c);
is($r->{status}, 200, 'TEST 14b: 200');
my $sha = sub { Digest::SHA::sha256_hex("t370-14-$_[0]") };
is_deeply(main::hashes($r), [ map { $sha->(1000 * $_) } reverse 16 .. 20 ],
          'TEST 14b: the five oldest of unknown outcome');
ok($r->{json}{truncated}, 'TEST 14b: ... truncated');
cmp_ok($s1->{Sort_rows} - $s0->{Sort_rows}, '>', 0, 'TEST 14b: sorted');
--- request
GET /admin?list=in_progress
--- response_body
{"keys":[],"limit":100,"truncated":false}
--- no_error_log
[error]
