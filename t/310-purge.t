# Background purge of expired rows: bounded batches, only expired rows
# (never a live lease), one nginx at a time through the purge lease, and
# the MySQL EVENT alternative of mysql/purge_event.sql.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

our $ZERO = '00' x 32;

sub seed {
    my ($port, $key, $state, $lease, $expires) = @_;

    my $kh = key_hash_hex($key);

    sql_at($port, "INSERT INTO idempotency_keys (key_hash, state, owner,"
           . " fingerprint, created_at, lease_until, expires_at, status)"
           . " VALUES (X'$kh', $state, X'0000000000000000000000000000000a',"
           . " X'$ZERO', UTC_TIMESTAMP(3),"
           . " UTC_TIMESTAMP(3) + INTERVAL $lease SECOND,"
           . " UTC_TIMESTAMP(3) + INTERVAL $expires SECOND, 201)");
}

# rows left by earlier files that have expired by now, and the lease row
sub clean {
    my ($port) = @_;

    sql_at($port, "DELETE FROM idempotency_keys"
                  . " WHERE expires_at <= UTC_TIMESTAMP(3)"
                  . " OR key_hash = X'$ZERO'");
}

sub present {
    my ($port, @keys) = @_;

    my $in = join ',', map { "X'" . key_hash_hex($_) . "'" } @keys;
    my $n = sql_at($port, "SELECT COUNT(*) FROM idempotency_keys"
                          . " WHERE key_hash IN ($in)");
    chomp $n;
    return $n;
}

sub lease_row {
    my ($owner, $lease) = @_;

    sql("INSERT INTO idempotency_keys (key_hash, state, owner, fingerprint,"
        . " created_at, lease_until, expires_at) VALUES (X'$ZERO', 0,"
        . " X'$owner', X'$ZERO', UTC_TIMESTAMP(3),"
        . " UTC_TIMESTAMP(3) + INTERVAL $lease SECOND, '9999-12-31')");
}

our $M = $ENV{TEST_NGINX_MYSQL_PORT};
our $OTHER = '0' x 30 . '01';

block_defaults(config => "    location = /t { return 200 ok; }\n",
               request => "GET /t\n");

no_shuffle();
run_tests();

is(present($M, 't310-4-a', 't310-4-b'), 2, 'TEST 4: purge=off kept them');

# the EVENT alternative, on the second server (only the shard tests use
# it), with the scheduler on just for this
{
    my $M2 = $ENV{TEST_NGINX_MYSQL2_PORT};
    my $sock = $ENV{TEST_NGINX_MYSQL2_SOCKET};
    my $cleanup = sub {
        eval {
            sql_root($sock, 'DROP EVENT IF EXISTS idempotency_purge;'
                            . ' SET GLOBAL event_scheduler = OFF');
        };
    };

    clean($M2);
    seed($M2, "t310-ev-$_", 1, -60, -10) for 1 .. 3;
    seed($M2, 't310-ev-live', 0, 60, -10);
    seed($M2, 't310-ev-new', 1, -60, 3600);

    sql_root($sock, undef, 'mysql/purge_event.sql');
    END { $cleanup->() if $cleanup }

    like(sql_root($sock, "SELECT EVENT_NAME, STATUS FROM"
                         . " information_schema.EVENTS"
                         . " WHERE EVENT_SCHEMA = DATABASE()"),
         qr/^idempotency_purge\tENABLED$/m, 'EVENT: created and enabled');

    sql_root($sock, 'ALTER EVENT idempotency_purge'
                    . ' ON SCHEDULE EVERY 1 SECOND;'
                    . ' SET GLOBAL event_scheduler = ON');

    my $left;
    for (1 .. 50) {
        $left = present($M2, map { "t310-ev-$_" } 1 .. 3);
        last if $left == 0;
        select undef, undef, undef, 0.2;
    }

    is($left, 0, 'EVENT: the expired rows are deleted');
    is(present($M2, 't310-ev-live', 't310-ev-new'), 2,
       'EVENT: a live lease and an unexpired row stay');

    $cleanup->();
}

__DATA__

=== TEST 1: expired rows go in bounded batches; live ones stay
--- http_config eval
IdemTest::store_config(purge => '1s', purge_batch => 2)
--- init
main::clean($main::M);
main::seed($main::M, "t310-1-$_", 1, -60, -10) for 1 .. 5;
main::seed($main::M, 't310-1-6', 0, -5, -5);       # dead owner, expired
main::seed($main::M, 't310-1-live', 0, 60, -5);    # live lease
main::seed($main::M, "t310-1-new$_", 1, -60, 3600) for 1 .. 2;
--- wait: 3
--- error_log eval
qr/idempotency store "main" mysql=127\.0\.0\.1:\d+: purged 6 expired rows \(4 statements\)/



=== TEST 2: another nginx holds the purge lease: this one leaves the rows
--- http_config eval
IdemTest::store_config(purge => '1s')
--- init
Test::More::is(main::present($main::M, map { "t310-1-$_" } 1 .. 6), 0,
               'TEST 1: every expired row is gone');
Test::More::is(main::present($main::M, 't310-1-live', 't310-1-new1',
                             't310-1-new2'), 3,
               'TEST 1: a live lease and unexpired rows stay');
main::clean($main::M);
main::lease_row($main::OTHER, 60);
main::seed($main::M, "t310-2-$_", 1, -60, -10) for 1 .. 2;
--- wait: 2.5
--- no_error_log
purged



=== TEST 3: that nginx is gone (its lease ended): this one takes over
--- http_config eval
IdemTest::store_config(purge => '1s')
--- init
Test::More::is(main::present($main::M, 't310-2-1', 't310-2-2'), 2,
               'TEST 2: the rows are still there');
main::clean($main::M);
main::lease_row($main::OTHER, -1);
main::seed($main::M, "t310-3-$_", 1, -60, -10) for 1 .. 2;
--- wait: 2.5
--- error_log eval
qr/purged 2 expired rows \(1 statements\)/



=== TEST 4: purge=off
--- http_config eval
IdemTest::store_config(purge => 'off')
--- init
main::clean($main::M);
main::seed($main::M, "t310-4-$_", 1, -60, -10) for qw(a b);
--- wait: 2.5
--- no_error_log
purged



=== TEST 5: an interval under a second is refused
--- http_config eval
IdemTest::store_config(purge => '500ms')
--- must_die
--- error_log
invalid parameter "purge=500ms" in "idempotency_store"



=== TEST 6: a batch of 0 is refused
--- http_config eval
IdemTest::store_config(purge_batch => 0)
--- must_die
--- error_log
invalid parameter "purge_batch=0" in "idempotency_store"
