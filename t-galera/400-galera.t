# Racing duplicates through two nginx instances whose stores are two
# different nodes of one 3-node MariaDB Galera cluster (scripts/galera.sh,
# `make test-galera`).  Instance A claims on node1, instance B on node2;
# the same keys are raced through both at once, so that both nodes insert
# the same key_hash concurrently and Galera lets one of them lose at
# commit with a deadlock error (1213).  The module must take that as a
# lost claim: claim again, read the winner's row and answer 409 or the
# replay; never 503, never a second execution.
#
# Not part of `make test` (prove -r t/ does not reach this directory).
# Environment: IDEM_GALERA_PORTS ("13306 13307 13308": node1 node2
# node3), TEST_NGINX_BACKEND_PORT (a backend this file starts), and the
# sizes IDEM_GALERA_KEYS (200), IDEM_GALERA_CONCURRENCY (16 requests per
# key, half through each instance), IDEM_GALERA_PARALLEL (10 keys per
# burst), IDEM_GALERA_WAIT_KEYS (40, raced through the idempotency_wait
# location), IDEM_GALERA_DELAY (backend delay, 300 ms),
# IDEM_GALERA_BUDGET (240 s for the races), IDEM_GALERA_LOG_LEVEL (debug:
# the debug log tells how many claims got 1213 and were claimed again).

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);

BEGIN {
    # own instances, ports and backend: `make test` and `make stress` may
    # run beside this file and use build/stress, 19xxx and 8091
    my $root = abs_path(dirname(__FILE__) . '/..');
    $ENV{IDEM_STRESS_DIR} ||= "$root/build/galera/stress";
    $ENV{IDEM_STRESS_PORT_BASE} ||= 13300;
    $ENV{TEST_NGINX_BACKEND_PORT} ||= 13380;
}

use Test::More;
use Time::HiRes qw(time sleep);

use lib 't/stress';
use IdemStress;
use IdemStress::Races;

my @gports = split ' ', ($ENV{IDEM_GALERA_PORTS} || '13306 13307 13308');
my $user = $ENV{TEST_NGINX_MYSQL_USER} || 'idem';
my $pass = $ENV{TEST_NGINX_MYSQL_PASSWORD} || 'idem-secret';

my $nkeys = $ENV{IDEM_GALERA_KEYS} || 200;
my $conc = $ENV{IDEM_GALERA_CONCURRENCY} || 16;
my $par = $ENV{IDEM_GALERA_PARALLEL} || 10;
my $delay = $ENV{IDEM_GALERA_DELAY} // 300;
my $budget = $ENV{IDEM_GALERA_BUDGET} || 240;

my ($mariadb) = grep { -x } map { "$_/mariadb" }
                split(/:/, $ENV{PATH} // ''), '/usr/bin';
plan skip_all => 'the mariadb client is not installed' unless $mariadb;

# SHOW GLOBAL STATUS of one node, over TCP as the module's user
sub node_status {
    my ($port) = @_;
    my $out = `$mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P$port \\
               -u$user -p$pass --connect-timeout=5 -N -B \\
               -e "SHOW GLOBAL STATUS LIKE 'wsrep%'" 2>&1`;
    return undef if $?;
    return { map { split /\t/, $_, 2 } grep { /\t/ } split /\n/, $out };
}

for my $i (0 .. 2) {
    my $s = node_status($gports[$i] // 0);
    plan skip_all => "Galera node " . ($i + 1) . " (127.0.0.1:"
                     . ($gports[$i] // '?') . ") does not answer:"
                     . " run with 'make test-galera'"
        unless $s && ($s->{wsrep_cluster_size} // 0) == 3
               && ($s->{wsrep_local_state_comment} // '') eq 'Synced';
}

my @ports = (port(81), port(82));
my @names = ('A (node1)', 'B (node2)');
my @ngx;
my $backend_pid = "$IdemStress::DIR/backend.pid";

$SIG{INT} = $SIG{TERM} = sub { exit 1 };
IdemStress::lock_dir();

END {
    $_->stop for grep { defined } @ngx;
    system("$IdemStress::ROOT/scripts/services.sh", 'backend', 'stop',
           $backend_pid, '-q');
}

system("$IdemStress::ROOT/scripts/services.sh", 'backend', 'restart',
       $BACKEND_PORT, $backend_pid, "$IdemStress::DIR/backend.log") == 0
    or BAIL_OUT("the test backend did not start on 127.0.0.1:$BACKEND_PORT");

for my $i (0, 1) {
    push @ngx, IdemStress::Nginx->start(
        name => "galera-" . ($i ? 'b' : 'a'), port => $ports[$i],
        log_level => $ENV{IDEM_GALERA_LOG_LEVEL} || 'debug',
        http => IdemStress::Races::nginx_http($ports[$i], $gports[$i]));
}

my @conflict_vars = qw(wsrep_local_cert_failures wsrep_local_bf_aborts);

sub conflicts {
    my %c;
    for my $i (0 .. 2) {
        my $s = node_status($gports[$i])
            or die "Galera node " . ($i + 1) . " stopped answering\n";
        $c{"node" . ($i + 1)}{$_} = $s->{$_} // 0 for @conflict_vars;
    }
    return \%c;
}

sub conflict_delta {
    my ($before, $after) = @_;
    my (%d, $sum);
    for my $n (sort keys %$after) {
        for my $v (@conflict_vars) {
            $d{$n}{$v} = $after->{$n}{$v} - $before->{$n}{$v};
            $sum += $d{$n}{$v};
        }
    }
    return ($sum, \%d);
}

# ---------------------------------------------------------------- races

# Bursts of $o{conc} identical requests per key, $o{par} keys at a time,
# alternating between the instances (the first two of every key go to A
# and B together).  Then every key is asked once more, alternately
# through B and A, until that answer is a replay, which must equal the
# executed response.
sub race {
    my (%o) = @_;

    my (@p, %st);
    my $uri = ($o{path} || '/orders') . "?delay=$o{delay}";
    my $deadline = time + $o{budget};
    my $t0 = time;

    %st = (requests => 0, answered => 0, n409 => 0, nreplay => 0,
           executions => 0, won => [0, 0], status => {}, keys => 0);

    for (my $first = 1; $first <= $o{keys}; $first += $o{par}) {
        if (time > $deadline) {
            push @p, "$o{tag}: out of time after $st{keys} keys"
                     . " ($o{budget}s budget)";
            last;
        }

        my $last = $first + $o{par} - 1;
        $last = $o{keys} if $last > $o{keys};
        my @keys = map { "$o{tag}-$_" } $first .. $last;
        my (@reqs, @owner);

        for my $d (0 .. $o{conc} - 1) {
            for my $key (@keys) {
                push @reqs, { port => $ports[$d % 2], method => 'POST',
                              uri => $uri, key => $key,
                              headers => [['Content-Type',
                                           'application/json']],
                              body => qq({"item":"book","key":"$key"}) };
                push @owner, $key;
            }
        }

        my @res = http_many(\@reqs, timeout => 120);
        $st{requests} += @reqs;
        $st{keys} += @keys;
        # an answer: a whole response with a status line, no transport error
        $st{answered} += grep { !$_->{error} && $_->{status} } @res;

        for my $i (0 .. $#res) {
            my $s = $res[$i]{error} ? 'error' : $res[$i]{status};
            $st{status}{$s}++;
            if ($s eq '201'
                && (IdemStress::hdr($res[$i], 'Idempotent-Replayed') // '')
                   ne 'true')
            {
                $st{won}[$reqs[$i]{port} == $ports[0] ? 0 : 1]++;
            }
        }

        for my $k (0 .. $#keys) {
            my $key = $keys[$k];
            my @mine = map { $res[$_] } grep { $owner[$_] eq $key }
                       0 .. $#res;
            my $s = summarize_burst($key, \@mine);

            $st{n409} += $s->{n409};
            $st{nreplay} += $s->{nreplay};
            push @p, @{ $s->{problems} };

            my $via = $ports[($k + 1) % 2];
            my $final;
            eval {
                wait_for("a replay of $key", 60, sub {
                    $final = http_one(port => $via, method => 'POST',
                        uri => $uri, key => $key,
                        headers => [['Content-Type', 'application/json']],
                        body => qq({"item":"book","key":"$key"}));
                    return !$final->{error} && $final->{status} == 201;
                }, 0.1);
            };
            push @p, "$key: no replay after the burst: $@" if $@;

            if ($final && $s->{original}) {
                my $f = summarize_burst($key, [$final],
                                        original => $s->{original},
                                        originals => 0);
                push @p, @{ $f->{problems} };
            }

            my $c = backend_count($key);
            $st{executions} += $c;
            push @p, "$key: executed $c times upstream" if $c != 1;
        }
    }

    $st{seconds} = time - $t0;
    $st{problems} = \@p;
    return \%st;
}

sub figures {
    my ($name, $s, $sum, $d) = @_;

    my $status = join(', ', map { "$_: $s->{status}{$_}" }
                            sort keys %{ $s->{status} });
    my $per = join('; ', map {
        my $n = $_;
        "$n cert failures $d->{$n}{wsrep_local_cert_failures},"
        . " bf aborts $d->{$n}{wsrep_local_bf_aborts}"
    } sort keys %$d);

    return sprintf("%s: %d keys x %d requests = %d requests in %.1fs;"
                   . " %d upstream executions (won through A %d, B %d);"
                   . " %d x 409, %d replays; statuses {%s};"
                   . " Galera conflicts %d (%s)",
                   $name, $s->{keys}, $s->{requests} / ($s->{keys} || 1),
                   $s->{requests}, $s->{seconds}, $s->{executions},
                   @{ $s->{won} }, $s->{n409}, $s->{nreplay}, $status,
                   $sum, $per);
}

my $t0 = time;
(my $tag = "galera-$$-" . int(time)) =~ s/[^A-Za-z0-9-]+/-/g;

my $before = conflicts();
my $s = race(tag => "$tag-race", keys => $nkeys, conc => $conc,
             par => $par, delay => $delay, budget => $budget);
my ($nconf, $d) = conflict_delta($before, conflicts());

my @p = @{ $s->{problems} };
ok(!@p, "races through A (node1) and B (node2): every key executed once,"
        . " the rest 409 problems or identical replays")
    or diag(join "\n", @p[0 .. ($#p > 30 ? 30 : $#p)]);
is($s->{keys}, $nkeys, "all $nkeys keys raced");
is($s->{executions}, $nkeys, "$nkeys executions upstream");
is($s->{answered}, $s->{requests}, "all $s->{requests} requests answered");
is(join(',', sort grep { !/^(201|409)$/ } keys %{ $s->{status} }), '',
   "no answer but 201 or 409 (no 503 store error)");
cmp_ok($s->{won}[0] * $s->{won}[1], '>', 0,
       "both instances won some keys (the race is cross-node)");
diag(figures('races', $s, $nconf, $d));

# The same through a location with idempotency_wait: the duplicates that
# lose at commit are held like any duplicate and get the replay.
{
    my $nwait = $ENV{IDEM_GALERA_WAIT_KEYS} || 40;
    my $b = conflicts();
    my $w = race(tag => "$tag-wait", keys => $nwait, conc => $conc,
                 par => $par, delay => $delay, path => '/wait',
                 budget => $budget);
    my ($n, $wd) = conflict_delta($b, conflicts());
    $nconf += $n;

    my @wp = @{ $w->{problems} };
    ok(!@wp, "idempotency_wait: every key executed once, the rest"
             . " identical replays")
        or diag(join "\n", @wp[0 .. ($#wp > 30 ? 30 : $#wp)]);
    is($w->{executions}, $nwait, "idempotency_wait: $nwait executions");
    is(join(',', sort grep { !/^201$/ } keys %{ $w->{status} }), '',
       "idempotency_wait: every answer is 201 (held duplicates replayed)");
    diag(figures('races, idempotency_wait', $w, $n, $wd));
}

# Hotter keys when the race produced no conflict on this machine: more
# duplicates per key, no backend delay, fewer keys at a time.
my $hot = 0;
my @hot_stats;
while ($nconf == 0 && $hot < 3 && time - $t0 < $budget) {
    $hot++;
    my $b = conflicts();
    my $h = race(tag => "$tag-hot$hot", keys => 40, conc => 64, par => 2,
                 delay => 0, budget => 60);
    my ($n, $hd) = conflict_delta($b, conflicts());
    $nconf += $n;
    push @hot_stats, $h;
    my @hp = @{ $h->{problems} };
    ok(!@hp, "hot round $hot: every key executed once, the rest 409 or"
             . " identical replays")
        or diag(join "\n", @hp[0 .. ($#hp > 30 ? 30 : $#hp)]);
    is(join(',', sort grep { !/^(201|409)$/ } keys %{ $h->{status} }), '',
       "hot round $hot: no answer but 201 or 409");
    diag(figures("hot round $hot", $h, $n, $hd));
}

cmp_ok($nconf, '>', 0, "Galera reported cross-node conflicts (1213) during"
                       . " the races: $nconf");

# ------------------------------------------- completed on A, replayed by B

{
    my $key = "$tag-cross";
    my @q = (method => 'POST', uri => '/orders?delay=50', key => $key,
             headers => [['Content-Type', 'application/json']],
             body => qq({"item":"pen","key":"$key"}));

    my $orig = http_one(port => $ports[0], @q);
    is($orig->{status}, 201, "completed through A");

    my $rep;
    eval {
        wait_for("the replay of $key through B", 30, sub {
            $rep = http_one(port => $ports[1], @q);
            return !$rep->{error} && $rep->{status} == 201;
        }, 0.1);
    };
    is($@, '', "B answers the key completed through A");
    is(IdemStress::hdr($rep, 'Idempotent-Replayed'), 'true',
       "B's answer is a replay");
    ok(defined $rep->{body} && defined $orig->{body}
       && $rep->{body} eq $orig->{body}, "B replays A's body byte for byte");
    for my $h (qw(Location X-Order-Id X-Execution Content-Type)) {
        is(IdemStress::hdr($rep, $h), IdemStress::hdr($orig, $h),
           "B replays A's $h");
    }
    is(backend_count($key), 1, "executed once for both instances");
}

# ------------------------------------------------------------- logs

my ($retried, $n1213, $nother, $nagain, $ngiveup, $debug) = (0) x 6;
my %try;
for my $i (0, 1) {
    my $n = $ngx[$i];
    my @lines = split /\n/, $n->error_log;

    # with the debug log (nginx --with-debug): what the module saw
    $debug++ if grep { /\[debug\]/ } @lines;
    $n1213 += grep { /mysql claim finished: rc=\d+ err=1213\b/ } @lines;
    $nother += grep { /mysql (?!claim)\w+ finished: rc=\d+ err=1213\b/ }
               @lines;
    for (@lines) {
        if (/claiming again in \d+ ms \(lost (\d+)\)/) {
            $nagain++;
            $try{$1}++;
        }
    }
    $ngiveup += grep { /races at commit \(1213\)/ } @lines;

    my @c = $n->crashes;
    ok(!@c, "$names[$i]: no worker crashed") or diag(join "\n", @c);

    # (the readiness probe asks for a file that is not there)
    my @bad = grep { /\[(error|crit|alert|emerg)\]/
                     && !m{open\(\) "[^"]*/__ready" failed} } @lines;
    ok(!@bad, "$names[$i]: no error/crit/alert/emerg in error.log")
        or diag(join "\n", @bad[0 .. ($#bad > 10 ? 10 : $#bad)]);

    my @claim = grep { /claim of key .* failed|could not be stored/ }
                @lines;
    ok(!@claim, "$names[$i]: no failed claim or completion")
        or diag(join "\n", @claim[0 .. ($#claim > 10 ? 10 : $#claim)]);

    # a completion write that lost a race is retried (a warning)
    $retried += grep { /storing the response .* failed/ } @lines;
}

SKIP: {
    skip "nginx does not write the debug log (--with-debug)", 2
        unless $debug;

    cmp_ok($n1213, '>', 0, "the module got 1213 for claims: $n1213");
    is($nagain + $ngiveup, $n1213, "every claim that got 1213 was claimed"
       . " again ($nagain) or answered as in progress ($ngiveup)");
}

diag(sprintf("galera: %d conflicts reported by the nodes"
             . " (wsrep_local_cert_failures + wsrep_local_bf_aborts);"
             . " the module got 1213 for %d claims (claimed again %d: %s;"
             . " answered as in progress after the last try %d) and for"
             . " %d other statements; %d completion writes retried;"
             . " %.1fs in all",
             $nconf, $n1213, $nagain,
             join(", ", map { "lost $_: $try{$_}" } sort { $a <=> $b }
                        keys %try) || '-',
             $ngiveup, $nother, $retried, time - $t0));

done_testing();
