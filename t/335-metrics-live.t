# idempotency_metrics on a live nginx (two workers, a cache zone and
# Redis): the gauges show a key in progress and its held duplicates while
# they exist and fall back to zero; replays are counted by tier; counters
# survive "nginx -s reload"; and a real Prometheus server (Debian's
# package, started privately) scrapes the endpoint and answers a query
# with the counter nginx reported.

use strict;
use warnings;

use Test::More;
use File::Path ();
use POSIX ();
use Time::HiRes qw(time sleep);

use lib 't/stress';
use IdemStress;

IdemStress::begin_file('REDIS_PORT');

my $P = port(335);
my $PROM = port(336);
my $tag = "m$$-" . int(time);
my ($ngx, $prom);

END {
    $prom->stop if $prom;
    $ngx->stop if $ngx;
}

$ngx = IdemStress::metrics_nginx(name => 'metrics', port => $P, workers => 2);

sub scrape {
    my $r = http_one(port => $P, method => 'GET', uri => '/metrics');
    die "scrape: " . ($r->{error} // $r->{status}) . "\n"
        if $r->{error} || $r->{status} != 200;
    return $r->{body};
}

sub metric { IdemStress::metric(@_) }

# ------------------------------------------------------- counters, tiers
my $m0 = scrape();
my $new0 = metric($m0, 'nginx_idempotency_requests_total',
                  store => 'main', status => 'new');
is($new0, 0, 'a fresh nginx: no request counted');

for my $i (1 .. 5) {
    is(post($P, '/orders', "$tag-$i")->{status}, 201, "key $i executed");
}
sleep 0.3;
for my $i (1 .. 5) {
    post($P, '/orders', "$tag-$i") for 1 .. 2;
}

# a request is counted when it ends, which its client may see after it
# has the whole answer: wait for the tenth replay's count, not a time
my $m = IdemStress::wait_for('the replays counted', 10, sub {
    my $s = scrape();
    my $n = metric($s, 'nginx_idempotency_requests_total', store => 'main',
                   status => 'replay') // 0;
    return $n >= 10 ? $s : undef;
});
is(metric($m, 'nginx_idempotency_requests_total', store => 'main',
          status => 'new'), 5, 'new: 5, whichever worker served them');
is(metric($m, 'nginx_idempotency_requests_total', store => 'main',
          status => 'replay'), 10, 'replay: 10');
my $by_tier = 0;
$by_tier += metric($m, 'nginx_idempotency_replays_total', store => 'main',
                   tier => $_) // 0 for qw(shm redis mysql);
is($by_tier, 10, 'the replays by tier add up');
ok(metric($m, 'nginx_idempotency_tier_writes_total', store => 'main',
          tier => 'redis') >= 5, 'entries written to Redis');
ok(metric($m, 'nginx_idempotency_cache_entries', store => 'main') >= 5,
   'entries in the cache zone');
ok(metric($m, 'nginx_idempotency_cache_bytes', store => 'main',
          state => 'used') > 0, 'bytes of the zone in use');
is(metric($m, 'nginx_idempotency_redis_up', store => 'main'), 1,
   'Redis up');

# ----------------------------------------------- gauges while in progress
my $slow = "$tag-slow";
my $pid = fork // die "fork: $!";
if ($pid == 0) {
    post($P, '/orders?delay=2500', $slow);
    POSIX::_exit(0);
}
sleep 0.5;
my @held;
for (1 .. 2) {
    my $h = fork // die "fork: $!";
    if ($h == 0) {
        post($P, '/orders?delay=2500', $slow);
        POSIX::_exit(0);
    }
    push @held, $h;
}

# each worker publishes its gauges once a second: wait until both the
# owner's and the holders' have been
my $during = IdemStress::wait_for('the key and its held duplicates in the '
                                  . 'metrics', 10, sub {
        my $t = scrape();
        return ((metric($t, 'nginx_idempotency_held_requests',
                        store => 'main') // 0) >= 2
                && (metric($t, 'nginx_idempotency_keys_in_progress',
                           store => 'main') // 0) >= 1) ? $t : 0;
    }, 0.1);
is(metric($during, 'nginx_idempotency_keys_in_progress', store => 'main'),
   1, 'one key in progress');
is(metric($during, 'nginx_idempotency_held_requests', store => 'main'), 2,
   'two duplicates held');

waitpid $_, 0 for $pid, @held;
my $after = IdemStress::wait_for('the gauges back at zero', 10, sub {
    my $t = scrape();
    return (metric($t, 'nginx_idempotency_keys_in_progress',
                   store => 'main') == 0
            && metric($t, 'nginx_idempotency_held_requests',
                      store => 'main') == 0) ? $t : 0;
}, 0.2);
ok($after, 'in progress and held back at 0 once the key completed');
is(backend_count($slow), 1, 'the slow key executed once');

# --------------------------------------------------------- reload
my $before = scrape();
my $new_before = metric($before, 'nginx_idempotency_requests_total',
                        store => 'main', status => 'new');
$ngx->signal('HUP');
IdemStress::wait_for('new workers after the reload', 30, sub {
    my @w = $ngx->workers;
    return @w == 2 && !grep { IdemStress::read_file("/proc/$_/cmdline")
                              =~ /shutting/ } @w;
}, 0.2);
sleep 1;
is(post($P, '/orders', "$tag-after-reload")->{status}, 201,
   'a new key after the reload');
my $reloaded = scrape();
is(metric($reloaded, 'nginx_idempotency_requests_total', store => 'main',
          status => 'new'), $new_before + 1,
   'the counters survived the reload');

# ------------------------------------------------- promtool, Prometheus
SKIP: {
    skip 'Debian\'s prometheus package is not installed', 3
        unless -x '/usr/bin/promtool' && -x '/usr/bin/prometheus';

    my $dir = "$IdemStress::DIR/metrics-prometheus";
    File::Path::make_path($dir);
    IdemStress::write_file("$dir/metrics.txt", $reloaded);
    my $out = `/usr/bin/promtool check metrics < $dir/metrics.txt 2>&1`;
    is($? >> 8, 0, "promtool check metrics passes$out");

    $prom = IdemStress::Prometheus->start(dir => "$dir/server", port => $PROM,
                                          targets => ["127.0.0.1:$P"]);

    my $want = metric($reloaded, 'nginx_idempotency_requests_total',
                      store => 'main', status => 'new');
    my $q = 'nginx_idempotency_requests_total{status="new"}';
    my $got = eval {
        IdemStress::wait_for('Prometheus to scrape nginx', 60, sub {
            my $r = $prom->query($q);
            return $r && $r->{status} eq 'success' && @{$r->{data}{result}}
                   ? $r->{data}{result}[0]{value}[1] : 0;
        }, 0.5);
    };
    diag($prom->log_text) unless $got;
    is($got, $want, "Prometheus read the counter back through its API "
       . "($want)");
    my $up = $prom->query('up{job="nginx"}');
    is($up && $up->{data}{result}[0]{value}[1], '1', 'the target is up');
}

unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert in the log');

done_testing();
