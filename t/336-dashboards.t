# The Grafana dashboard (contrib/grafana/idempotency.json) and the
# Prometheus alerts (contrib/prometheus/idempotency.rules.yml) load and
# mean what they say: promtool checks the rules and runs their unit tests
# (and those tests fail on rules that can never fire); the dashboard is a
# well-formed Grafana dashboard; a private Prometheus scrapes a live nginx
# (a store with a cache zone and Redis, so that every metric is exported),
# loads the rules, and answers every query of the dashboard; and every
# metric name and label value the two files use is one nginx exported.

use lib 't';
use Test::Nginx::Socket;
use IdemTest;
use File::Path ();
use JSON::PP ();

plan skip_all => "Debian's prometheus package is not installed (make deps)"
    unless -x '/usr/bin/promtool' && -x '/usr/bin/prometheus';
IdemStress::begin_file('REDIS_PORT');
plan 'no_plan';

our $RULES_DIR = "$IdemStress::ROOT/contrib/prometheus";
our $RULES = "$RULES_DIR/idempotency.rules.yml";
our $RULES_TEST = "$RULES_DIR/idempotency.rules.test.yml";
our $DASHBOARD = "$IdemStress::ROOT/contrib/grafana/idempotency.json";
our $DIR = "$IdemStress::DIR/dashboards";

File::Path::remove_tree($DIR);
File::Path::make_path($DIR);

# the alerts of the rules, and their expressions
our $RULES_TEXT = IdemStress::read_file($RULES);
our @ALERTS = $RULES_TEXT =~ /^\s*- alert: (\S+)/mg;
our @RULE_EXPRS = $RULES_TEXT =~ /^\s*expr: (.+?)\s*$/mg;

# the dashboard (undef if it is not JSON: TEST 2 says so), its
# variables, and its queries: [panel title or variable, expression]
our $DASH = eval { JSON::PP::decode_json(IdemStress::read_file($DASHBOARD)) };
our $DASH_ERROR = $@;
our %VARS = map { $_->{name} => $_ } @{ ($DASH // {})->{templating}{list} // [] };
our @EXPRS;
for my $p (@{ ($DASH // {})->{panels} // [] }) {
    next if $p->{type} eq 'row';
    push @EXPRS, [$p->{title}, $_->{expr}] for @{$p->{targets} // []};
}
for my $v (values %VARS) {
    my $q = ref $v->{query} ? $v->{query}{query} : $v->{query};
    push @EXPRS, ["variable $v->{name}", $1]
        if $v->{type} eq 'query' && $q =~ /^label_values\((.+), \w+\)$/;
}

our $OWNER = $$;
our $PROM;
END { $PROM->stop if $PROM && $$ == $OWNER }

no_shuffle();
block_defaults(
    http_config => IdemTest::store_config(
        cache => 'idem_dashboards:1m',
        redis => '127.0.0.1:$TEST_NGINX_REDIS_PORT',
        secret => 'dashboards-test-secret-0123456789'),
    config => IdemTest::orders_location(idempotency_wait => '10s')
              . "    location = /metrics { idempotency_metrics; }\n",
    request => "GET /metrics",
    response_body_like => '(?m)^nginx_idempotency_requests_total\{',
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: the rules: promtool checks them and runs their unit tests, each alert has a test that expects it to fire and one that expects it not to, and the tests fail on rules that never fire
--- init
my $out = `promtool check rules $main::RULES 2>&1`;
is($? >> 8, 0, 'promtool check rules') or diag($out);

$out = `cd $main::RULES_DIR && promtool test rules idempotency.rules.test.yml 2>&1`;
is($? >> 8, 0, 'promtool test rules: the unit tests pass') or diag($out);

my @alerts = @main::ALERTS;
ok(@alerts >= 8, scalar(@alerts) . ' alerts');
is(scalar @main::RULE_EXPRS, scalar @alerts, 'an expr per alert, each on one line')
    or diag('a block scalar (| or >) hides an expr from this test');
unlike($main::RULES_TEXT, qr/^\s*expr:\s*[|>]/m, 'no expr is a block scalar');

my $tests = IdemStress::read_file($main::RULES_TEST);
for my $a (@alerts) {
    like($tests, qr/alertname: \Q$a\E\n\s+exp_alerts:\n\s+- exp_labels:/,
         "$a: a unit test expects it to fire");
    like($tests, qr/alertname: \Q$a\E\n\s+exp_alerts: \[\]/,
         "$a: a unit test expects it not to");
}

# the same tests on rules whose thresholds are never reached must fail
File::Path::make_path("$main::DIR/never");
(my $never = $main::RULES_TEXT) =~ s/^(\s*expr: .*) (==|>) 0$/$1 $2 1e9/mg;
IdemStress::write_file("$main::DIR/never/idempotency.rules.yml", $never);
IdemStress::write_file("$main::DIR/never/idempotency.rules.test.yml", $tests);
$out = `cd $main::DIR/never && promtool test rules idempotency.rules.test.yml 2>&1`;
isnt($? >> 8, 0, 'the unit tests fail on rules that never fire');
my %missed = map { $_ => 1 } $out =~ /alertname: (\w+), time:/g;
is(CORE::join(' ', grep { !$missed{$_} } @alerts), '',
   'each alert\'s test noticed it');



=== TEST 2: the dashboard is a well-formed Grafana dashboard: a Prometheus data source variable, panels with unique ids on the grid without overlaps, each with queries, and only defined variables in them
--- init
ok($main::DASH, 'the dashboard is JSON') or diag($main::DASH_ERROR);
my $dash = $main::DASH // {};

ok($dash->{title} && $dash->{uid} && $dash->{schemaVersion},
   'title, uid, schemaVersion');

my %vars = %main::VARS;
is(($vars{datasource} // {})->{type}, 'datasource',
   'a data source variable (the user picks the Prometheus)');
is(($vars{datasource} // {})->{query}, 'prometheus', '... of Prometheus');

my (%ids, @boxes, @bad);
for my $p (@{$dash->{panels} // []}) {
    push @bad, "panel id $p->{id} twice" if $ids{$p->{id}}++;
    my $g = $p->{gridPos} // {};
    push @bad, "$p->{title}: outside the 24 columns"
        if !defined $g->{w} || $g->{x} + $g->{w} > 24 || $g->{x} < 0;
    for my $b (@boxes) {
        push @bad, "$p->{title} overlaps $b->{title}"
            if $g->{x} < $b->{x} + $b->{w} && $b->{x} < $g->{x} + $g->{w}
               && $g->{y} < $b->{y} + $b->{h} && $b->{y} < $g->{y} + $g->{h};
    }
    push @boxes, { %$g, title => $p->{title} };

    next if $p->{type} eq 'row';

    push @bad, "$p->{title}: data source is not \${datasource}"
        unless ($p->{datasource}{uid} // '') eq '${datasource}';
    my %ref;
    push @bad, "$p->{title}: no query" unless @{$p->{targets} // []};
    for my $t (@{$p->{targets} // []}) {
        push @bad, "$p->{title}: refId $t->{refId} twice"
            if $ref{$t->{refId}}++;
    }
}
is(CORE::join("\n", @bad), '', 'panels: unique ids, on the grid, no overlap, '
   . 'a data source and queries each');
ok(@main::EXPRS >= 20, scalar(@main::EXPRS) . ' queries in the dashboard');

my @unknown_vars;
for my $e (@main::EXPRS) {
    for my $v ($e->[1] =~ /\$\{?(\w+)/g) {
        push @unknown_vars, "$e->[0]: \$$v"
            unless $vars{$v} || $v =~ /^__(rate_interval|interval|range)$/;
    }
}
is(CORE::join(', ', @unknown_vars), '', 'every variable a query uses is defined');



=== TEST 3: every metric name, and every label value a query matches literally, that the dashboard and the rules use is one nginx exports
--- init
for my $i (1 .. 3) {
    post_key('/orders', "t336-$i") for 1 .. 2;
}

my $scrape = IdemStress::http_one(port => port(), method => 'GET',
                                  uri => '/metrics');

# the series nginx exports: name => { label => { value => 1 } }
my %exported;
for my $line (split /\n/, $scrape->{body} // '') {
    next unless $line =~ /^(\w+)(?:\{([^}]*)\})? \S+$/;
    my $labels = $exported{$1} //= {};
    my %l = ($2 // '') =~ /(\w+)="((?:[^"\\]|\\.)*)"/g;
    $labels->{$_}{$l{$_}} = 1 for keys %l;
}
ok(keys %exported >= 20, scalar(keys %exported) . ' metric names exported');

# (=, or =~ with plain alternatives)
my (%used, @missing);
for my $e (@main::EXPRS, map { ['rules', $_] } @main::RULE_EXPRS) {
    my ($where, $expr) = @$e;
    while ($expr =~ /\b(nginx_idempotency_\w+)(?:\{([^}]*)\})?/g) {
        my ($name, $sel) = ($1, $2 // '');
        $used{$name} = 1;
        next unless $exported{$name};
        while ($sel =~ /(\w+)(=~?)"([^"]*)"/g) {
            my ($label, $op, $value) = ($1, $2, $3);
            next if $label eq 'instance' || $label eq 'job'
                    || $value =~ /[\$\\.*+?()\[\]{}^]/;
            for my $v ($op eq '=~' ? split(/\|/, $value) : $value) {
                push @missing, "$where: $name\{$label=\"$v\"}"
                    unless $exported{$name}{$label}{$v};
            }
        }
    }
}
is(CORE::join("\n", @missing), '', 'every label value used is exported');

ok($exported{$_}, "$_ is exported") for sort keys %used;



=== TEST 4: a private Prometheus scrapes nginx, loads every rule and evaluates each without error, answers every query of the dashboard, and a healthy nginx fires no alert
--- init
for my $i (1 .. 3) {
    post_key('/orders', "t336-prom-$i") for 1 .. 2;
}

$main::PROM = IdemStress::Prometheus->start(dir => "$main::DIR/prometheus",
                                            port => IdemTest::extra_port(338),
                                            targets => ['127.0.0.1:' . port()],
                                            rule_files => [$main::RULES]);
my $prom = $main::PROM;

my $scraped = eval {
    IdemStress::wait_for('Prometheus to scrape nginx twice', 60, sub {
        my $r = $prom->query('count_over_time(nginx_idempotency_keys_in_progress[1m])');
        return $r && $r->{status} eq 'success' && @{$r->{data}{result}}
               && $r->{data}{result}[0]{value}[1] >= 2;
    }, 0.5);
};
ok($scraped, 'Prometheus scraped nginx') or diag($prom->log_text);

my $groups = eval {
    IdemStress::wait_for('the rules evaluated', 30, sub {
        my $r = $prom->api('rules');
        return 0 unless $r && $r->{status} eq 'success';
        my @r = map { @{$_->{rules}} } @{$r->{data}{groups}};
        return (@r && !grep({ $_->{health} ne 'ok' } @r)) ? \@r : 0;
    }, 0.5);
};
is(scalar @{$groups // []}, scalar @main::ALERTS,
   'Prometheus loaded every rule, each evaluated without error')
    or diag($prom->log_text);

my @failed;
for my $e (@main::EXPRS) {
    (my $q = $e->[1]) =~ s/\$__rate_interval|\$__interval|\$__range/1m/g;
    $q =~ s/\$\{?\w+\}?/.*/g;
    my $r = $prom->query($q);
    push @failed, "$e->[0]: $q: " . ($r ? $r->{error} // '?' : 'no answer')
        unless $r && $r->{status} eq 'success';
}
is(CORE::join("\n", @failed), '', 'Prometheus answers every query of the dashboard');

my $firing = $prom->api('alerts');
is(CORE::join(' ', map { $_->{labels}{alertname} }
                   grep { $_->{state} eq 'firing' }
                   @{$firing->{data}{alerts} // []}),
   '', 'a healthy nginx fires no alert');
$prom->stop;
undef $main::PROM;
--- timeout: 10
