# The Grafana dashboard (contrib/grafana/idempotency.json) and the
# Prometheus alerts (contrib/prometheus/idempotency.rules.yml) load and
# mean what they say: promtool checks the rules and runs their unit tests
# (and those tests fail on rules that can never fire); the dashboard is a
# well-formed Grafana dashboard; a private Prometheus scrapes a live nginx
# (a store with a cache zone and Redis, so that every metric is exported),
# loads the rules, and answers every query of the dashboard; and every
# metric name and label value the two files use is one nginx exported.

use strict;
use warnings;

use Test::More;
use File::Path ();
use JSON::PP ();
use Time::HiRes qw(time sleep);

use lib 't/stress';
use IdemStress;

plan skip_all => "Debian's prometheus package is not installed (make deps)"
    unless -x '/usr/bin/promtool' && -x '/usr/bin/prometheus';
IdemStress::begin_file('REDIS_PORT');

my $RULES_DIR = "$IdemStress::ROOT/contrib/prometheus";
my $RULES = "$RULES_DIR/idempotency.rules.yml";
my $RULES_TEST = "$RULES_DIR/idempotency.rules.test.yml";
my $DASHBOARD = "$IdemStress::ROOT/contrib/grafana/idempotency.json";
my $DIR = "$IdemStress::DIR/dashboards";

my $P = port(337);
my $PROM = port(338);
my ($ngx, $prom);

END {
    $prom->stop if $prom;
    $ngx->stop if $ngx;
}

File::Path::remove_tree($DIR);
File::Path::make_path($DIR);

# ------------------------------------------------------------ the rules
my $out = `promtool check rules $RULES 2>&1`;
is($? >> 8, 0, 'promtool check rules') or diag($out);

$out = `cd $RULES_DIR && promtool test rules idempotency.rules.test.yml 2>&1`;
is($? >> 8, 0, 'promtool test rules: the unit tests pass') or diag($out);

my $rules = IdemStress::read_file($RULES);
my @alerts = $rules =~ /^\s*- alert: (\S+)/mg;
my @rule_exprs = $rules =~ /^\s*expr: (.+?)\s*$/mg;
ok(@alerts >= 8, scalar(@alerts) . ' alerts');
is(scalar @rule_exprs, scalar @alerts, 'an expr per alert, each on one line')
    or diag('a block scalar (| or >) hides an expr from this test');
unlike($rules, qr/^\s*expr:\s*[|>]/m, 'no expr is a block scalar');

my $tests = IdemStress::read_file($RULES_TEST);
for my $a (@alerts) {
    like($tests, qr/alertname: \Q$a\E\n\s+exp_alerts:\n\s+- exp_labels:/,
         "$a: a unit test expects it to fire");
    like($tests, qr/alertname: \Q$a\E\n\s+exp_alerts: \[\]/,
         "$a: a unit test expects it not to");
}

# the same tests on rules whose thresholds are never reached must fail
File::Path::make_path("$DIR/never");
(my $never = $rules) =~ s/^(\s*expr: .*) (==|>) 0$/$1 $2 1e9/mg;
IdemStress::write_file("$DIR/never/idempotency.rules.yml", $never);
IdemStress::write_file("$DIR/never/idempotency.rules.test.yml", $tests);
$out = `cd $DIR/never && promtool test rules idempotency.rules.test.yml 2>&1`;
isnt($? >> 8, 0, 'the unit tests fail on rules that never fire');
my @missed = $out =~ /alertname: (\w+), time:/g;
my %missed = map { $_ => 1 } @missed;
is(join(' ', grep { !$missed{$_} } @alerts), '',
   'each alert\'s test noticed it');

# ----------------------------------------------------------- the dashboard
my $dash = eval { JSON::PP::decode_json(IdemStress::read_file($DASHBOARD)) };
ok($dash, 'the dashboard is JSON') or diag($@);
$dash //= {};

ok($dash->{title} && $dash->{uid} && $dash->{schemaVersion},
   'title, uid, schemaVersion');

my %vars = map { $_->{name} => $_ } @{$dash->{templating}{list} // []};
is(($vars{datasource} // {})->{type}, 'datasource',
   'a data source variable (the user picks the Prometheus)');
is(($vars{datasource} // {})->{query}, 'prometheus', '... of Prometheus');

my (@exprs, %ids, @boxes, @bad);
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
        push @exprs, [$p->{title}, $t->{expr}];
    }
}
for my $v (values %vars) {
    my $q = ref $v->{query} ? $v->{query}{query} : $v->{query};
    push @exprs, ["variable $v->{name}", $1]
        if $v->{type} eq 'query' && $q =~ /^label_values\((.+), \w+\)$/;
}
is(join("\n", @bad), '', 'panels: unique ids, on the grid, no overlap, '
   . 'a data source and queries each');
ok(@exprs >= 20, scalar(@exprs) . ' queries in the dashboard');

my @unknown_vars;
for my $e (@exprs) {
    for my $v ($e->[1] =~ /\$\{?(\w+)/g) {
        push @unknown_vars, "$e->[0]: \$$v"
            unless $vars{$v} || $v =~ /^__(rate_interval|interval|range)$/;
    }
}
is(join(', ', @unknown_vars), '', 'every variable a query uses is defined');

# ---------------------------------------------------- a live nginx, scraped
$ngx = IdemStress::metrics_nginx(name => 'dashboards', port => $P);

my $tag = "d$$-" . int(time);
for my $i (1 .. 3) {
    http_one(port => $P, method => 'POST', uri => '/orders',
             key => "$tag-$i", body => 'x') for 1 .. 2;
}

my $scrape = http_one(port => $P, method => 'GET', uri => '/metrics');
is($scrape->{status}, 200, 'nginx exports its metrics');

# the series nginx exports: name => { label => { value => 1 } }
my %exported;
for my $line (split /\n/, $scrape->{body} // '') {
    next unless $line =~ /^(\w+)(?:\{([^}]*)\})? \S+$/;
    my $labels = $exported{$1} //= {};
    my %l = ($2 // '') =~ /(\w+)="((?:[^"\\]|\\.)*)"/g;
    $labels->{$_}{$l{$_}} = 1 for keys %l;
}
ok(keys %exported >= 20, scalar(keys %exported) . ' metric names exported');

# every name, and every label value a query matches literally (=, or =~
# with plain alternatives), is one nginx exported
my (%used, @missing);
for my $e (@exprs, map { ['rules', $_] } @rule_exprs) {
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
is(join("\n", @missing), '', 'every label value used is exported');

ok($exported{$_}, "$_ is exported") for sort keys %used;

# --------------------------------------- Prometheus: the rules, the queries
$prom = IdemStress::Prometheus->start(dir => "$DIR/prometheus",
                                      port => $PROM,
                                      targets => ["127.0.0.1:$P"],
                                      rule_files => [$RULES]);

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
is(scalar @{$groups // []}, scalar @alerts,
   'Prometheus loaded every rule, each evaluated without error')
    or diag($prom->log_text);

my @failed;
for my $e (@exprs) {
    (my $q = $e->[1]) =~ s/\$__rate_interval|\$__interval|\$__range/1m/g;
    $q =~ s/\$\{?\w+\}?/.*/g;
    my $r = $prom->query($q);
    push @failed, "$e->[0]: $q: " . ($r ? $r->{error} // '?' : 'no answer')
        unless $r && $r->{status} eq 'success';
}
is(join("\n", @failed), '', 'Prometheus answers every query of the dashboard');

my $firing = $prom->api('alerts');
is(join(' ', map { $_->{labels}{alertname} }
             grep { $_->{state} eq 'firing' } @{$firing->{data}{alerts} // []}),
   '', 'a healthy nginx fires no alert');

unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert in the log');

done_testing();
