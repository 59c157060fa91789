# idempotency_metrics: the Prometheus text format, from counters in shared
# memory that every worker updates (whether or not a store has a cache
# zone), and gauges that each worker publishes.  promtool (Debian's
# prometheus package) checks the output.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use File::Temp ();
use Time::HiRes ();

sub scrape { http_req(method => 'GET', uri => '/metrics')->{body} }

sub metric { IdemStress::metric(@_) }

no_shuffle();
run_tests();

__DATA__

=== TEST 1: requests by status, replays by tier, store operations, promtool
--- http_config eval
TierTest::tier_stores(main => '')
--- config eval
IdemTest::orders_location(idempotency_wait => '5s') . q{
    location = /metrics { idempotency_metrics; }
}
--- init
my $m0 = main::scrape();
my $new0 = main::metric($m0, 'nginx_idempotency_requests_total',
                        store => 'main', status => 'new') // 0;
is(http_req(key => 't330-1', body => 'x')->{status}, 201, 'executed');
is(http_req(key => 't330-1', body => 'x')->{status}, 201, 'replayed');
is(http_req(key => 't330-1', body => 'y')->{status}, 422, 'mismatch');
is(http_req(key => "bad\x01", body => 'x')->{status}, 400, 'invalid');
Time::HiRes::sleep(0.2);
my $m = main::scrape();
is(main::metric($m, 'nginx_idempotency_requests_total', store => 'main',
                status => 'new') - $new0, 1, 'one new');
ok(main::metric($m, 'nginx_idempotency_requests_total', store => 'main',
                status => 'replay') >= 1, 'a replay');
ok(main::metric($m, 'nginx_idempotency_replays_total', store => 'main',
                tier => 'mysql') >= 1, '... by MySQL');
ok(main::metric($m, 'nginx_idempotency_requests_total', store => 'main',
                status => 'mismatch') >= 1, 'a mismatch');
ok(main::metric($m, 'nginx_idempotency_requests_total', store => 'main',
                status => 'invalid') >= 1, 'an invalid key');
ok(main::metric($m, 'nginx_idempotency_store_operations_total',
                store => 'main', operation => 'claim', result => 'ok') >= 3,
   'claims counted');
ok(main::metric($m, 'nginx_idempotency_store_operations_total',
                store => 'main', operation => 'complete',
                result => 'ok') >= 1, 'a completion counted');
my $count = main::metric($m,
    'nginx_idempotency_store_operation_duration_seconds_count',
    store => 'main', operation => 'claim');
my $inf = main::metric($m,
    'nginx_idempotency_store_operation_duration_seconds_bucket',
    store => 'main', operation => 'claim', le => '+Inf');
is($inf, $count, 'the histogram: +Inf bucket = count');
is(main::metric($m, 'nginx_idempotency_mysql_up', store => 'main',
                server => "127.0.0.1:$ENV{TEST_NGINX_MYSQL_PORT}"), 1,
   'MySQL up');
ok(defined main::metric($m, 'nginx_idempotency_mysql_connections',
                        store => 'main', state => 'idle'),
   'connections by state');
is(main::metric($m, 'nginx_idempotency_keys_in_progress', store => 'main'),
   0, 'no key in progress');
unlike($m, qr/t330-1/, 'no key in the output');
# promtool comes with Debian's prometheus package (scripts/deps.sh); the
# file is not in servroot, which the real Test::Nginx must be able to
# remove
my ($fh, $f) = File::Temp::tempfile('idem-metrics-XXXXXX', TMPDIR => 1,
                                    UNLINK => 1);
print $fh $m;
close $fh;
my $out = `promtool check metrics < $f 2>&1`;
is($? >> 8, 0, "promtool check metrics: $out");
unlink $f;
--- request
GET /metrics
--- response_headers
Content-Type: text/plain; version=0.0.4; charset=utf-8
--- response_body_like: ^# HELP nginx_idempotency_requests_total Requests
--- no_error_log
[error]
