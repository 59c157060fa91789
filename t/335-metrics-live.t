# idempotency_metrics on a live nginx (two workers, a cache zone and
# Redis): the gauges show a key in progress and its held duplicates while
# they exist and fall back to zero; replays are counted by tier; counters
# survive "nginx -s reload"; and a real Prometheus server (Debian's
# package, started privately) scrapes the endpoint and answers a query
# with the counter nginx reported.

use lib 't';
use Test::Nginx::Socket;
use IdemTest;
use TierTest qw(reload_nginx);
use File::Path ();
use POSIX ();
use Time::HiRes ();

IdemStress::begin_file('REDIS_PORT');
plan 'no_plan';

our $OWNER = $$;
our $PROM;
END { $PROM->stop if $PROM && $$ == $OWNER }

sub scrape {
    my $r = IdemStress::http_one(port => port(), method => 'GET',
                                 uri => '/metrics');
    die "scrape: " . ($r->{error} // $r->{status}) . "\n"
        if $r->{error} || $r->{status} != 200;
    return $r->{body};
}

# a sample of the store "main" by its name and its other labels
sub metric {
    my ($text, $name, %labels) = @_;
    return IdemStress::metric($text, "nginx_idempotency_$name",
                              store => 'main', %labels);
}

# a POST in a child, for the gauges of a key in progress
sub bg_post {
    my ($uri, $key) = @_;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        post_key($uri, $key);
        POSIX::_exit(0);
    }
    return $pid;
}

master_on();
workers(2);

no_shuffle();
block_defaults(
    http_config => IdemTest::store_config(
        cache => 'idem_metrics:1m',
        redis => '127.0.0.1:$TEST_NGINX_REDIS_PORT',
        secret => 'metrics-test-secret-0123456789'),
    config => IdemTest::orders_location(idempotency_wait => '10s', count => 1)
              . "    location = /metrics { idempotency_metrics; }\n",
    request => "GET /metrics",
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: a fresh nginx: no request counted
--- response_body_like: (?m)^nginx_idempotency_requests_total\{store="main",status="new"\} 0$



=== TEST 2: five keys executed and replayed twice each: new 5 and replay 10 whichever worker served them, the replays by tier add up, the zone and Redis are counted
--- init
for my $i (1 .. 5) {
    is(post_key('/orders', "t335-$i")->{status}, 201, "key $i executed");
}
Time::HiRes::sleep(0.3);
for my $i (1 .. 5) {
    post_key('/orders', "t335-$i") for 1 .. 2;
}

# a request is counted when it ends, which its client may see after it
# has the whole answer: wait for the tenth replay's count, not a time
my $m = IdemStress::wait_for('the replays counted', 10, sub {
    my $s = main::scrape();
    return (main::metric($s, 'requests_total', status => 'replay') // 0)
           >= 10 ? $s : undef;
});
my $by_tier = 0;
$by_tier += main::metric($m, 'replays_total', tier => $_) // 0
    for qw(shm redis mysql);
is($by_tier, 10, 'the replays by tier add up');
ok(main::metric($m, 'tier_writes_total', tier => 'redis') >= 5,
   'entries written to Redis');
ok(main::metric($m, 'cache_entries') >= 5, 'entries in the cache zone');
ok(main::metric($m, 'cache_bytes', state => 'used') > 0,
   'bytes of the zone in use');
--- response_body_like eval
'(?m)(?=[\s\S]*^nginx_idempotency_requests_total\{store="main",status="new"\} 5$)'
. '(?=[\s\S]*^nginx_idempotency_requests_total\{store="main",status="replay"\} 10$)'
. '(?=[\s\S]*^nginx_idempotency_redis_up\{store="main"\} 1$)'



=== TEST 3: the gauges show one key in progress and its two held duplicates, and are back at 0 once the key completed; the key executed once
--- init
my @pids = main::bg_post('/orders?delay=2500', 't335-slow');
Time::HiRes::sleep(0.5);
push @pids, main::bg_post('/orders?delay=2500', 't335-slow') for 1 .. 2;

# each worker publishes its gauges once a second: wait until both the
# owner's and the holders' have been
my $during = IdemStress::wait_for('the key and its held duplicates in the '
                                  . 'metrics', 10, sub {
        my $t = main::scrape();
        return ((main::metric($t, 'held_requests') // 0) >= 2
                && (main::metric($t, 'keys_in_progress') // 0) >= 1) ? $t : 0;
    }, 0.1);
is(main::metric($during, 'keys_in_progress'), 1, 'one key in progress');
is(main::metric($during, 'held_requests'), 2, 'two duplicates held');

waitpid $_, 0 for @pids;
my $after = IdemStress::wait_for('the gauges back at zero', 10, sub {
    my $t = main::scrape();
    return (main::metric($t, 'keys_in_progress') == 0
            && main::metric($t, 'held_requests') == 0) ? $t : 0;
}, 0.2);
ok($after, 'in progress and held back at 0 once the key completed');
--- request
GET /count?key=t335-slow
--- response_body: 1
--- timeout: 10



=== TEST 4: the counters survive a reload: two new keys before it and one after are three
--- init
is(post_key('/orders', "t335-before-$_")->{status}, 201,
   "a new key before the reload ($_)") for 1, 2;
reload_nginx();
Time::HiRes::sleep(1);
is(post_key('/orders', 't335-after-reload')->{status}, 201,
   'a new key after the reload');
--- response_body_like: (?m)^nginx_idempotency_requests_total\{store="main",status="new"\} 3$
--- timeout: 10



=== TEST 5: promtool passes the metrics, and a private Prometheus scrapes nginx and reads the counter back through its API
--- skip_eval: 9: !(-x '/usr/bin/promtool' && -x '/usr/bin/prometheus')
--- init
is(post_key('/orders', 't335-prom')->{status}, 201, 'a key executed');
my $metrics = main::scrape();

my $dir = "$IdemStress::DIR/metrics-prometheus";
File::Path::remove_tree($dir);
File::Path::make_path($dir);
IdemStress::write_file("$dir/metrics.txt", $metrics);
my $out = `/usr/bin/promtool check metrics < $dir/metrics.txt 2>&1`;
is($? >> 8, 0, "promtool check metrics passes$out");

$main::PROM = IdemStress::Prometheus->start(
    dir => "$dir/server", port => IdemTest::extra_port(336),
    targets => ['127.0.0.1:' . port()]);

my $want = main::metric($metrics, 'requests_total', status => 'new');
my $q = 'nginx_idempotency_requests_total{status="new"}';
my $got = eval {
    IdemStress::wait_for('Prometheus to scrape nginx', 60, sub {
        my $r = $main::PROM->query($q);
        return $r && $r->{status} eq 'success' && @{$r->{data}{result}}
               ? $r->{data}{result}[0]{value}[1] : 0;
    }, 0.5);
};
diag($main::PROM->log_text) unless $got;
is($got, $want, "Prometheus read the counter back through its API ($want)");
my $up = $main::PROM->query('up{job="nginx"}');
is($up && $up->{data}{result}[0]{value}[1], '1', 'the target is up');
$main::PROM->stop;
undef $main::PROM;
--- response_body_like: (?m)^nginx_idempotency_requests_total\{store="main",status="new"\} 1$
--- timeout: 10
