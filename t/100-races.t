# Racing duplicates: bursts of identical requests (same key, same body),
# 100 at a time per key, against one nginx and against two nginx that
# share one MariaDB, with 2 workers each.  Every key must execute upstream
# exactly once; every other answer is a 409 problem or a byte-identical
# replay of the executed response.
#
# The default run is short (well under a minute on 2 cores).  `make
# stress` runs the long one (IDEM_STRESS=long: about 30 000 racing
# duplicates) and prints the figures.  Sizes can be tuned with
# IDEM_STRESS_CONCURRENCY, IDEM_STRESS_KEYS (per scenario) and
# IDEM_STRESS_DELAY (backend delay, ms).

use strict;
use warnings;

use Test::More;
use Time::HiRes qw(time);

use lib 't/stress';
use IdemStress;
use IdemStress::Races;

IdemStress::begin_file('MYSQL_PORT');

my $long = ($ENV{IDEM_STRESS} // '') eq 'long';
my $conc = $ENV{IDEM_STRESS_CONCURRENCY} || 100;
my $delay = $ENV{IDEM_STRESS_DELAY} // 200;
my %keys = $long ? (one => 100, two => 100, nodelay => 50, wait => 50)
                 : (one => 16, two => 16, nodelay => 8, wait => 8);
if (my $k = $ENV{IDEM_STRESS_KEYS}) { $keys{$_} = $k for keys %keys }
my $par = $long ? 4 : 2;

my @ports = (port(81), port(82));
my @ngx;

END { $_->stop for grep { defined } @ngx }

for my $i (0, 1) {
    push @ngx, IdemStress::Nginx->start(
        name => "race" . ($i + 1), port => $ports[$i],
        http => IdemStress::Races::nginx_http($ports[$i],
                                              $ENV{TEST_NGINX_MYSQL_PORT}));
}

my $t0 = time;
my @stats;

# name, nginx ports, keys, location, backend delay (ms)
for my $sc (['one instance', [$ports[0]], $keys{one}, '/orders', $delay],
            ['two instances', \@ports, $keys{two}, '/orders', $delay],
            ['two instances, no delay', \@ports, $keys{nodelay}, '/orders',
             0],
            ['two instances, wait', \@ports, $keys{wait}, '/wait', $delay])
{
    my ($name, $ports, $nkeys, $path, $ms) = @$sc;

    my $s = IdemStress::Races::run_scenario(
        name => $name, ports => $ports, keys => $nkeys, conc => $conc,
        parallel => $par, path => $path, delay => $ms);
    push @stats, $s;

    my @p = @{ $s->{problems} };
    ok(!@p, "$name: every key executed once, the rest 409 or identical"
            . " replays, from every instance") or diag(join "\n", @p[0 .. ($#p > 30 ? 30 : $#p)]);
    is($s->{executions}, $nkeys, "$name: $nkeys executions upstream");
    is($s->{answered}, $s->{requests},
       "$name: all $s->{requests} requests answered");

    if ($path eq '/wait') {
        cmp_ok($s->{nreplay}, '>', 0, "$name: held duplicates got replays");
    }
}

for my $n (@ngx) {
    my @bad = $n->health;
    ok(!@bad, "$n->{name}: no worker crash, no alert/crit/emerg")
        or diag(join "\n", @bad);
}

my ($req, $dup, $exe, $c409, $rep) = (0) x 5;
for my $s (@stats) {
    $req += $s->{requests};
    $dup += $s->{duplicates};
    $exe += $s->{executions};
    $c409 += $s->{n409};
    $rep += $s->{nreplay};
}

diag(IdemStress::Races::figures($_)) for @stats;
diag(sprintf("races %s: %d requests, %d racing duplicates, %d upstream "
             . "executions for %d keys, %d x 409, %d replays, %.1fs "
             . "(backend delay %d ms, 2 workers per nginx)",
             $long ? 'long' : 'short', $req, $dup, $exe,
             $keys{one} + $keys{two} + $keys{nodelay} + $keys{wait},
             $c409, $rep,
             time - $t0, $delay));

done_testing();
