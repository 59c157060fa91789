# A live owner keeps its key: lease renewals go ahead of claims and held
# duplicates' polls (a flood of held duplicates on a small pool does not
# starve them), a row past its retention is not taken over while its owner
# still renews, and a duplicate that has seen its key in progress is never
# forwarded when the store fails, even with idempotency_on_store_error pass.

use lib 't';
use Test::Nginx::Socket;
use IdemTest;
use POSIX ();
use Time::HiRes ();

IdemStress::begin_file();
plan 'no_plan';

our $OWNER = $$;
our $MYSQL = $ENV{TEST_NGINX_MYSQL_PORT};
our $RELAY_PORT = IdemTest::extra_port(152);
our ($RELAY, $SLOW);

END {
    if ($$ == $OWNER) {
        kill 'KILL', $_ for grep { $_ } $RELAY, $SLOW;
    }
}

# the store "relayed" goes through a relay that a block cuts (SIGKILL);
# relay_up starts it again when it is not running
sub relay_up {
    return if $RELAY && waitpid($RELAY, POSIX::WNOHANG()) == 0;
    $RELAY = tcp_proxy($RELAY_PORT, $MYSQL);
}

sub relay_cut {
    kill 'KILL', $RELAY;
    waitpid $RELAY, 0;
    undef $RELAY;
}

relay_up();

# 20 ms per packet: a few dozen statements a second for the whole pool
$SLOW = tcp_proxy(IdemTest::extra_port(153), $MYSQL, 0.02);

$ENV{TEST_NGINX_RELAY_PORT} = $RELAY_PORT;
$ENV{TEST_NGINX_SLOW_PORT} = IdemTest::extra_port(153);

# runs the first request in a child; returns a sub that waits for it and
# gives back its "STATUS X-IDEM"
sub first_request {
    my ($uri, $key) = @_;

    pipe(my $rd, my $wr) or die "pipe: $!";
    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        close $rd;
        print {$wr} idem_of(post_key($uri, $key, timeout => 30));
        close $wr;
        POSIX::_exit(0);
    }

    close $wr;

    return sub {
        local $/;
        my $out = <$rd>;
        waitpid $pid, 0;
        return $out // '';
    };
}

sub upstream {
    my ($key) = @_;
    IdemStress::wait_for("$key upstream", 10,
                         sub { IdemStress::backend_count($key) == 1 });
}

# 500 held duplicates at once
worker_connections(1024);

# a block's log line may come before its last request
check_accum_error_log();

no_shuffle();
block_defaults(
    http_config => <<'HTTP',
idempotency_store tiny mysql=127.0.0.1:$TEST_NGINX_MYSQL_PORT
    user=$TEST_NGINX_MYSQL_USER password=$TEST_NGINX_MYSQL_PASSWORD
    database=$TEST_NGINX_MYSQL_DB pool=2 query_timeout=500ms;
idempotency_store slow mysql=127.0.0.1:$TEST_NGINX_SLOW_PORT
    user=$TEST_NGINX_MYSQL_USER password=$TEST_NGINX_MYSQL_PASSWORD
    database=$TEST_NGINX_MYSQL_DB pool=2 wait_queue=1000
    connect_timeout=1s query_timeout=1s;
idempotency_store relayed mysql=127.0.0.1:$TEST_NGINX_RELAY_PORT
    user=$TEST_NGINX_MYSQL_USER password=$TEST_NGINX_MYSQL_PASSWORD
    database=$TEST_NGINX_MYSQL_DB pool=4 connect_timeout=300ms
    query_timeout=500ms;
upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
HTTP
    config => <<'CONFIG',
    add_header X-Idem $idempotency_status always;

    location /flood {
        idempotency slow;
        idempotency_lease 3s;
        idempotency_wait 8s;
        proxy_pass http://backend/orders;
    }

    location /retention {
        idempotency tiny;
        idempotency_ttl 2s;
        idempotency_lease 1500ms;
        proxy_pass http://backend/orders;
    }

    # a lease longer than the outage the block makes
    location /late {
        idempotency relayed;
        idempotency_lease 6s;
        proxy_pass http://backend/orders;
    }

    location /pass {
        idempotency relayed;
        idempotency_on_store_error pass;
        idempotency_lease 1500ms;
        idempotency_wait 3s;
        proxy_pass http://backend/orders;
    }

    location = /count { proxy_pass http://backend/__count; }
CONFIG
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: 500 duplicates (idempotency_wait) flood a slow store, pool 2: the first request gets its answer, no duplicate is forwarded, held ones are replayed, the owner's lease is never lost
--- init
my $name = '500 duplicates flood a slow store';
my $first = main::first_request('/flood?delay=4000', 't150-flood');
main::upstream('t150-flood');

my @res = IdemStress::http_many(
    [ map { post_key('/flood?delay=4000', 't150-flood', spec => 1) } 1 .. 500 ],
    timeout => 40);

is($first->(), '201 new', "$name: the first request gets its answer");

my %by;
$by{ idem_of($_) }++ for @res;
note("$name: " . join ', ', map { "$_ x$by{$_}" } sort keys %by);

my $fwd = grep { my $i = IdemStress::hdr($_, 'X-Idem') // '-';
                 $i =~ /^(new|takeover)$/ || ($i eq 'error' && $_->{status} < 500) }
          @res;
is($fwd, 0, "$name: no duplicate was forwarded");
ok(($by{'201 replay'} // 0) > 0, "$name: held duplicates are replayed");
--- request
GET /count?key=t150-flood
--- response_body: 1
--- no_error_log
taken over
lease lost
keep failing
[emerg]
--- timeout: 10



=== TEST 2: a row past its retention whose owner still renews: a duplicate gets 409, the key is not taken over, the first request gets its answer
--- init
my $name = 'a row past its retention whose owner still renews';
my $first = main::first_request('/retention?delay=3500', 't150-ret');
main::upstream('t150-ret');

# the row expires 2 s after the claim; its lease is renewed meanwhile
Time::HiRes::sleep(2.6);
is(idem_of(post_key('/retention?delay=3500', 't150-ret')), '409 conflict',
   "$name: a duplicate gets 409, the key is not taken over");
is($first->(), '201 new', "$name: the first request gets its answer");
--- request
GET /count?key=t150-ret
--- response_body: 1



=== TEST 3: idempotency_on_store_error pass, the store lost while a duplicate waits: the duplicate gets 409, never a forward, and the log says why
--- init
# the first request is upstream; the duplicate (the block's request) sees
# the key in progress and is held; then the store goes away under it
main::relay_up();
$main::FIRST = main::first_request('/pass?delay=1500', 't150-pass');
main::upstream('t150-pass');

my $pid = fork // die "fork: $!";
if ($pid == 0) {
    Time::HiRes::sleep(0.4);
    kill 'KILL', $main::RELAY;
    POSIX::_exit(0);
}
$main::KILLER = $pid;
--- more_headers
Idempotency-Key: t150-pass
--- request eval
["POST /pass?delay=1500\nx", "GET /count?key=t150-pass"]
--- error_code eval
[409, 200]
--- response_headers eval
["X-Idem: conflict", ""]
--- response_body_like eval
['', '^1$']
--- error_log
the key was in progress, so the request is never forwarded
--- timeout: 20



=== TEST 4: a completion the store cannot take in time: the client still gets its response after the hold, the log says so, and once the store is back the write went on: a retry gets the replay
--- init
my $name = 'a completion the store cannot take in time';

# the last block's first request and the relay it cut
$main::FIRST->() if $main::FIRST;
waitpid $main::KILLER, 0 if $main::KILLER;
main::relay_cut() if $main::RELAY;
main::relay_up();

IdemStress::wait_for('the relayed store to answer', 30, sub {
    return (post_key('/late', 't150-probe-' . ++$main::PROBE)->{status} // 0)
           == 201;
}, 0.25);

my $first = main::first_request('/late?delay=1000', 't150-late');
main::upstream('t150-late');

# the store goes away before the response is complete
main::relay_cut();

my $t0 = Time::HiRes::time();
is($first->(), '201 new', "$name: the client still gets its response");
cmp_ok(Time::HiRes::time() - $t0, '<', 5,
       "$name: ... after the hold, not a retry schedule");

# the write goes on: once the store is back, the retry is a replay
main::relay_up();
IdemStress::wait_for('t150-late stored', 30, sub {
    idem_of(post_key('/late?delay=1000', 't150-late')) =~ /replay/;
}, 0.25);
--- more_headers
Idempotency-Key: t150-late
--- request eval
["POST /late?delay=1000\nx", "GET /count?key=t150-late"]
--- error_code eval
[201, 200]
--- response_headers eval
["X-Idem: replay", ""]
--- response_body_like eval
['"execution":1,', '^1$']
--- error_log eval
qr/response of key \Q${\ IdemStress::key_id('t150-late')}\E not committed within 500 ms: sent to the client anyway/
--- no_error_log
[alert]
[crit]
[emerg]
--- timeout: 10
