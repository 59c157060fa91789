# Many nginx nodes sharing a sharded store: two instances (own prefixes,
# ports and shared-memory caches, 2 workers each) in front of the two
# private MariaDB servers.  Concurrent duplicates across the instances
# execute once; a key completed on one instance is replayed by the other;
# of the two, one purges each shard at a time, and the other takes over
# when it goes away.

use strict;
use warnings;

use Test::More;
use Time::HiRes qw(time sleep);

use lib 't/stress';
use IdemStress;
use IdemStress::Races;

IdemStress::begin_file('MYSQL_PORT', 'MYSQL2_PORT');

my @M = ($ENV{TEST_NGINX_MYSQL_PORT}, $ENV{TEST_NGINX_MYSQL2_PORT});
my @ports = (port(91), port(92));
my $tag = "n$$-" . int(time);
my $ZERO = '00' x 32;
my @ngx;

END { $_->stop for grep { defined } @ngx }

sub sql_at {
    chomp(my $out = IdemStress::sql_at(@_));
    return $out;
}

sub store {
    my ($i) = @_;

    return "idempotency_store main mysql=127.0.0.1:$M[0]"
         . " mysql=127.0.0.1:$M[1]"
         . " user=" . ($ENV{TEST_NGINX_MYSQL_USER} || 'idem')
         . " password=" . ($ENV{TEST_NGINX_MYSQL_PASSWORD} || 'idem-secret')
         . " database=" . ($ENV{TEST_NGINX_MYSQL_DB} || 'idempotency')
         . " pool=32 wait_queue=4096 connect_timeout=5s query_timeout=10s"
         . " purge=1s purge_batch=10 cache=nodes$i:1m;\n";
}

# expired rows on both shards before the instances start, for the purge
my %seeded;

sub seed_expired {
    my ($shard, $n, $label) = @_;

    my @v;
    for my $j (1 .. $n) {
        my $kh = key_hash_hex("$tag-$label-$shard-$j");
        push @v, "(X'$kh', 1, X'" . ('00' x 16) . "', X'$ZERO',"
                 . " UTC_TIMESTAMP(3), UTC_TIMESTAMP(3),"
                 . " UTC_TIMESTAMP(3) - INTERVAL 5 SECOND)";
        push @{ $seeded{$label}[$shard] }, $kh;
    }
    sql_at($M[$shard], "INSERT INTO idempotency_keys (key_hash, state, owner,"
                       . " fingerprint, created_at, lease_until, expires_at)"
                       . " VALUES " . join(', ', @v));
}

sub left {
    my ($label, $shard) = @_;

    my $in = join ', ', map { "X'$_'" } @{ $seeded{$label}[$shard] };
    return sql_at($M[$shard], "SELECT COUNT(*) FROM idempotency_keys"
                              . " WHERE key_hash IN ($in)");
}

# rows that expired in earlier files, and earlier purge leases (a lease
# of an nginx that is gone would hold the purge off for 3 s)
for my $m (@M) {
    sql_at($m, "DELETE FROM idempotency_keys WHERE key_hash = X'$ZERO'"
               . " OR expires_at <= UTC_TIMESTAMP(3)");
}

seed_expired($_, 35, 'first') for 0, 1;

for my $i (0, 1) {
    push @ngx, IdemStress::Nginx->start(name => "node" . ($i + 1),
                                        port => $ports[$i],
                                        http => IdemStress::Races::nginx_http(
                                            $ports[$i], store($i + 1)));
}

# ---------------------------------------------------------------- races

my $s = IdemStress::Races::run_scenario(
    name => 'nodes', ports => \@ports, keys => 12, conc => 40,
    parallel => 2, path => '/orders', delay => 200);

my @p = @{ $s->{problems} };
ok(!@p, 'two instances, two shards: every key executed once, the rest'
        . ' 409 or identical replays, from both instances')
    or diag(join "\n", @p[0 .. ($#p > 20 ? 20 : $#p)]);
is($s->{executions}, 12, '12 executions upstream for 12 keys');
diag(IdemStress::Races::figures($s));

# ------------------------------------------- completed on one, replayed

for my $shard (0, 1) {
    my $key;
    for my $j (1 .. 100) {
        $key = "$tag-cross-$j";
        last if hex(substr(key_hash_hex($key), 0, 8)) % 2 == $shard;
    }

    my %q = (method => 'POST', uri => '/orders?delay=0', key => $key,
             headers => [['Content-Type', 'application/json']],
             body => qq({"item":"pen"}));

    my $first = http_one(port => $ports[0], %q);
    is($first->{status}, 201, "shard $shard: executed on node1");
    is(IdemStress::hdr($first, 'X-Idem'), 'new', "shard $shard: new");

    # the completion write lands after the last byte
    my $second;
    wait_for("the replay of $key on node2", 10, sub {
        $second = http_one(port => $ports[1], %q);
        return ($second->{status} // 0) == 201;
    }, 0.05);

    is(IdemStress::hdr($second, 'Idempotent-Replayed'), 'true',
       "shard $shard: node2 replays it");
    is(IdemStress::hdr($second, 'X-Tier'), 'mysql',
       "shard $shard: node2 found it in MySQL (its cache is its own)");
    is($second->{body}, $first->{body}, "shard $shard: same body");

    for my $h (qw(Content-Type Location X-Order-Id X-Execution)) {
        is(IdemStress::hdr($second, $h), IdemStress::hdr($first, $h),
           "shard $shard: same $h");
    }

    is(IdemStress::backend_count($key), 1, "shard $shard: executed once");
}

# ------------------------------------------------------------------ purge

my $ok = eval {
    wait_for('the first expired rows to go', 15, sub {
        left('first', 0) == 0 && left('first', 1) == 0
    }, 0.2);
    1;
};
ok($ok, 'expired rows purged on both shards')
    or diag("left: " . left('first', 0) . " and " . left('first', 1));

# one purger per shard: the lease holder; the other instance skipped
my %by;
for my $n (@ngx) {
    for my $l (split /\n/, $n->error_log) {
        next unless $l =~ /mysql=127\.0\.0\.1:(\d+): purged (\d+) expired/;
        $by{$1}{$n->{name}} += $2;
    }
}

for my $m (@M) {
    my @who = sort keys %{ $by{$m} || {} };
    is(scalar @who, 1, "shard $m: purged by one instance (@who)");
    cmp_ok((map { $by{$m}{$_} } @who)[0] // 0, '>=', 35,
           "shard $m: all 35 rows by it");
}

# the holder goes away: the other one takes over once its lease ends
my ($holder) = keys %{ $by{$M[0]} };
my ($gone) = grep { $_->{name} eq $holder } @ngx;
my ($other) = grep { $_->{name} ne $holder } @ngx;

$gone->stop;
@ngx = grep { $_ != $gone } @ngx;

seed_expired(0, 5, 'second');

$ok = eval {
    wait_for('the other instance to purge', 20, sub {
        left('second', 0) == 0
    }, 0.2);
    1;
};
ok($ok, "after $holder stopped, $other->{name} purged shard $M[0]");
like($other->error_log,
     qr/mysql=127\.0\.0\.1:$M[0]: purged \d+ expired rows/,
     "$other->{name} logged it");

for my $n (@ngx) {
    my @bad = $n->health;
    ok(!@bad, "$n->{name}: no worker crash, no alert/crit/emerg")
        or diag(join "\n", @bad);
}

done_testing();
