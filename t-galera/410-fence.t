# Fence or find on a 3-node Galera cluster (scripts/galera.sh, `make
# test-galera`): two nginx, A with its keys and markers on node1, B on
# node2, fence the same keys of unknown outcome at once, while the bank
# (backend/app.py --bank-db) commits its withdrawals through node3.  The
# marker's primary key is decided by certification there: of two nodes
# inserting the same (marker, epoch), one commits and the other's
# insert fails at commit with 1213, which the fence takes as "undecided
# this time" (502 outcome-unknown, X-Should-Retry: true).  Checked in the
# bank's tables: one withdrawal per key, and every key answered 201 (or
# its replay) once the retries are done: the run of the next epoch, or,
# for an epoch that ran, the bank's answer from its record (a find).
#
# Not part of `make test`.  Environment: IDEM_GALERA_PORTS ("13306 13307
# 13308"), IDEM_GALERA_FENCE_KEYS (40 per batch), IDEM_GALERA_BANK_PORT
# (13480).

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use Digest::SHA qw(sha256_hex);

BEGIN {
    my $root = abs_path(dirname(__FILE__) . '/..');
    $ENV{IDEM_STRESS_DIR} ||= "$root/build/galera/stress-fence";
    $ENV{IDEM_STRESS_PORT_BASE} ||= 13400;
}

use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use IO::Socket::INET ();

use lib 't/stress';
use IdemStress;

my @gports = split ' ', ($ENV{IDEM_GALERA_PORTS} || '13306 13307 13308');
my $user = $ENV{TEST_NGINX_MYSQL_USER} || 'idem';
my $pass = $ENV{TEST_NGINX_MYSQL_PASSWORD} || 'idem-secret';
my $nkeys = $ENV{IDEM_GALERA_FENCE_KEYS} || 40;
my $bank_port = $ENV{IDEM_GALERA_BANK_PORT} || 13480;

my ($py) = grep { system("$_ -c 'import pymysql' 2>/dev/null") == 0 }
           ($ENV{PYTHON} // (), '/usr/bin/python3', 'python3');
plan skip_all => 'no python3 with pymysql (scripts/deps.sh)' unless $py;

for my $p (@gports) {
    my $n = eval { IdemStress::sql_at($p, "SELECT 1") } // '';
    plan skip_all => "Galera node 127.0.0.1:$p does not answer:"
                     . " run with 'make test-galera'" unless $n =~ /^1/;
}

my @ports = (port(81), port(82));
my @ngx;
my $bank;

$SIG{INT} = $SIG{TERM} = sub { exit 1 };
IdemStress::lock_dir();

END {
    $_->stop for grep { defined } @ngx;
    kill 'KILL', $bank if $bank;
}

# the bank on node3
$bank = fork // die "fork: $!";
if ($bank == 0) {
    POSIX::setsid();
    open STDIN, '<', '/dev/null';
    open STDOUT, '>>', "$IdemStress::DIR/bank.log";
    open STDERR, '>&', \*STDOUT;
    exec $py, "$IdemStress::ROOT/backend/app.py", '--port', $bank_port,
         '--bank-db', 'idempotency', '--bank-host', '127.0.0.1',
         '--bank-port', $gports[2], '--bank-user', $user,
         '--bank-password', $pass;
    exit 1;
}
IdemStress::wait_for('the bank', 15, sub {
    IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $bank_port)
});

for my $i (0, 1) {
    my $http = IdemStress::store_line('main', $gports[$i],
                                      query_timeout => '2s') . <<"HTTP";
    server {
        listen 127.0.0.1:$ports[$i];
        location /withdraw {
            idempotency main;
            idempotency_fence main;
            idempotency_epoch_header Idempotency-Epoch;
            proxy_set_header Idempotency-Marker \$idempotency_marker;
            proxy_read_timeout 2s;
            proxy_pass http://127.0.0.1:$bank_port;
        }
    }
HTTP
    push @ngx, IdemStress::Nginx->start(name => 'fence-' . ($i ? 'b' : 'a'),
                                        port => $ports[$i], http => $http);
}

sub sql1 { return IdemStress::sql_at($gports[0], @_) }

my $run = time;
$run =~ s/\D//g;

sub uri { return "/withdraw?account=$_[0]&amount=1" }

# keys whose epoch 1 went out and came back unknown: the row a dead
# request left (state 3), an account of its own; with $ran, epoch 1 also
# committed its withdrawal in the bank (its answer lost)
sub seed {
    my ($tag, $ran) = @_;
    my @keys = map { "g410-$run-$tag-$_" } 1 .. $nkeys;
    for my $k (@keys) {
        my $kh = IdemStress::key_hash_hex($k);
        my $fp = sha256_hex("idempotency-fp/1POST\0" . uri($k) . "\0x");
        sql1("INSERT INTO accounts VALUES ('$k', 100)");
        sql1("INSERT INTO idempotency_keys (key_hash, state, owner, epoch,"
             . " fingerprint, created_at, lease_until, expires_at) VALUES"
             . " (X'$kh', 3, X'11111111111111111111111111111111', 1,"
             . " X'$fp', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3),"
             . " UTC_TIMESTAMP(3) + INTERVAL 1 DAY)");
        next unless $ran;
        my $r = IdemStress::http_one(port => $bank_port, method => 'POST',
            uri => uri($k), body => 'x',
            headers => [['Idempotency-Marker', $kh],
                        ['Idempotency-Epoch', 1]]);
        die "the bank did not run epoch 1 of $k: $r->{status}\n"
            unless $r->{status} == 201;
    }
    # every node has the rows before the race
    IdemStress::wait_for("the seeds on node2", 30, sub {
        IdemStress::sql_at($gports[1], "SELECT COUNT(*) FROM idempotency_keys"
            . " WHERE state = 3 AND HEX(key_hash) IN ("
            . join(',', map { "'" . uc(IdemStress::key_hash_hex($_)) . "'" }
                   @keys) . ")") =~ /^$nkeys$/m });
    return @keys;
}

# 4 retries of every key at once, 2 through each nginx; then each key
# again, alternately, until a definite answer (30 s at most)
sub race {
    my (@keys) = @_;
    my (@reqs, %seen);
    for my $d (0 .. 3) {
        push @reqs, map { { port => $ports[$d % 2], method => 'POST',
                            uri => uri($_), key => $_, body => 'x' } } @keys;
    }
    my @res = IdemStress::http_many(\@reqs, timeout => 60);
    for my $i (0 .. $#res) {
        $seen{$reqs[$i]{key}}{$res[$i]{error} ? 'error' : $res[$i]{status}}++;
    }
    my %final;
    for my $j (0 .. $#keys) {
        my $k = $keys[$j];
        my $deadline = time + 30;
        while (time < $deadline) {
            my $r = IdemStress::http_one(port => $ports[$j % 2],
                method => 'POST', uri => uri($k), key => $k, body => 'x');
            my $s = $r->{error} ? 'error' : $r->{status};
            $seen{$k}{"settle $s"}++;
            if ($s == 201 || $s == 410) {
                $final{$k} = $s;
                last;
            }
            sleep 0.2;
        }
    }
    return (\%seen, \%final);
}

sub withdrawals {
    my (@keys) = @_;
    my %n = map { $_ => 0 } @keys;
    for (split /\n/, IdemStress::sql_at($gports[2], "SELECT account,"
         . " COUNT(*) FROM withdrawals WHERE account LIKE 'g410-$run-%'"
         . " GROUP BY account")) {
        my ($a, $c) = split /\t/;
        $n{$a} = $c if exists $n{$a};
    }
    return \%n;
}

sub summary {
    my ($seen) = @_;
    my %t;
    for my $k (keys %$seen) {
        $t{$_} += $seen->{$k}{$_} for keys %{ $seen->{$k} };
    }
    return join(', ', map { "$_: $t{$_}" } sort keys %t);
}

for my $case (['unknown, never ran', 0, 201], ['unknown, ran', 1, 201]) {
    my ($what, $ran, $want) = @$case;
    my @keys = seed($ran ? 'ran' : 'new', $ran);
    my ($seen, $final) = race(@keys);
    diag("$what: " . summary($seen));
    my $n = withdrawals(@keys);
    is(scalar(grep { $n->{$_} != 1 } @keys), 0,
       "$what: exactly one withdrawal for each of $nkeys keys");
    is(scalar(grep { ($final->{$_} // 0) != $want } @keys), 0,
       "$what: every key answered $want in the end");
    my $bad = grep { $seen->{$_}{error} || $seen->{$_}{503} } @keys;
    is($bad, 0, "$what: no transport error, no 503");
}

my $undecided = 0;
for my $n (@ngx) {
    my $log = IdemStress::read_file($n->{errlog});
    $undecided += () = $log =~ /is undecided/g;
}
diag("fences undecided (Galera's lost races, lock waits): $undecided");

done_testing();
