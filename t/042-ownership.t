# A release breaks ownership: once a key is released (by an operator
# through idempotency_admin, or by the module itself), the owner it had
# can neither renew nor complete it, so its late renewal revives no lease
# and its late completion stores nothing that the tiers could replay.  A
# released row keeps the key's epoch until the key's retention ends, the
# purge included, and is free for the next claim as a new operation.  A
# request that outlives idempotency_ttl still leaves an answer that its
# retry replays.  Executions are counted by the backend.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use JSON::PP ();
use POSIX ();

our $ZERO = '00' x 32;

# the operator API and the backend's count, beside the orders location
sub locations {
    return q{
    location = /admin {
        idempotency_admin main;
    }
    location = /count {
        proxy_pass http://backend/__count;
    }
};
}

# the orders location: a lease renewed every second, its status, its tier
# and its epoch in headers
sub orders {
    return q{
    location /orders {
        idempotency main;
        idempotency_lease 3s;
        idempotency_epoch_header Idempotency-Epoch;
        proxy_pass http://backend;
        add_header X-Idem $idempotency_status always;
        add_header X-Tier $idempotency_tier always;
        add_header X-Epoch $idempotency_epoch always;
    }
} . locations();
}

sub order {
    my ($key, $uri) = @_;

    my $r = http_req(key => $key, body => 'x', uri => $uri // '/orders');
    ($r->{execution}) = $r->{body} =~ /"execution":(\d+)/;
    $r->{execution} //= '-';
    $r->{epoch} = ($r->{headers}{'x-epoch'} // ['-'])->[0];
    $r->{replayed} = ($r->{headers}{'idempotent-replayed'} // [''])->[0];

    return $r;
}

# a request in a child; returns a sub that waits for it and gives back
# "status X-Idem execution"
sub first_request {
    my ($key, $uri) = @_;

    pipe(my $rd, my $wr) or die "pipe: $!";
    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        close $rd;
        my $r = main::order($key, $uri);
        print {$wr} "$r->{status} $r->{idem} $r->{execution}";
        close $wr;
        POSIX::_exit(0);
    }

    close $wr;

    return sub {
        local $/;
        my $out = <$rd>;
        waitpid $pid, 0;
        return $out // '';
    };
}

sub count { IdemStress::backend_count($_[0]) }

# state, whether its lease has ended, epoch, whether past retention
sub row {
    my ($key) = @_;

    my $out = sql("SELECT state, lease_until <= UTC_TIMESTAMP(3), epoch,"
                  . " expires_at <= UTC_TIMESTAMP(3) FROM idempotency_keys"
                  . " WHERE key_hash = X'" . key_hash_hex($key) . "'");
    chomp $out;
    $out =~ s/\t/ /g;

    return $out;
}

# an operator's release of a key in progress, on the version it reads
# (a renewal between the read and the release makes it stale: read again)
sub release {
    my ($key) = @_;
    my $x;

    IdemStress::wait_for("the release of $key", 20, sub {
        my $j = main::admin('GET', "key=$key")->{json};
        $x = main::admin('POST', "action=release&key=$key"
                                 . "&version=$j->{version}");
        $x->{status} == 200;
    }, 0.1);

    return $x;
}

sub lease_lost {
    my ($key) = @_;
    return qr/idempotency: key \Q${\ IdemStress::key_id($key)}\E is no longer held by its request \(lease lost\)/;
}

sub not_stored {
    my ($key) = @_;
    return qr/response of key \Q${\ IdemStress::key_id($key)}\E not stored: the key is no longer held by its request/;
}

no_shuffle();
run_tests();

__DATA__

=== TEST 1: an operator releases a key whose owner still renews: its renewal changes nothing, a retry runs as a new operation (not 409), the owner's completion stores nothing, later retries replay the new answer
--- http_config eval
IdemTest::store_config(query_timeout => '1s')
--- config eval
main::orders()
--- init
my $key = 't042-1';
my $kh = key_hash_hex($key);
my $first = main::first_request($key, '/orders?delay=5000');
IdemStress::wait_for("$key upstream", 10, sub { main::count($key) == 1 });
my $x = main::release($key);
is_deeply($x->{json}, { key_hash => $kh, action => 'released',
                        was => 'in_progress' }, 'released');
# the owner's next renewal lands on the released row
wait_log(main::lease_lost($key));
is(main::row($key), '4 1 1 0',
   'the renewal changed nothing: released, no lease, epoch 1, retention kept');
my $j = main::admin('GET', "key=$key")->{json};
is("$j->{state} " . ($j->{renewing} ? 'renewing' : 'not renewing'),
   'released not renewing', 'the operator sees it released');
ok(!grep({ $_->{key_hash} eq $kh }
         @{ main::admin('GET', 'list=in_progress&limit=1000')->{json}{keys} }),
   'not listed in progress');
my $r = main::order($key);
is("$r->{status} $r->{idem} $r->{execution} $r->{epoch}", '201 new 2 2',
   'a retry while the old owner still runs: a new operation, epoch 2');
is($first->(), '201 new 1', 'the first client gets its own answer');
wait_log(main::not_stored($key));
wait_state($key, 1);
is(main::row($key), '1 1 2 0', 'the row is the new operation\'s answer');
$r = main::order($key);
is("$r->{status} $r->{replayed} $r->{execution}", '201 true 2',
   'a later retry replays the answer MySQL holds');
--- request
GET /count?key=t042-1
--- response_body chomp
2
--- no_error_log
[error]
--- timeout: 30

=== TEST 2: released under its owner, which completes afterwards: no tier replays the old owner's answer, the retry runs anew with the next epoch
--- http_config eval
TierTest::tier_stores(main => 'cache=t042:1m query_timeout=1s')
--- config eval
main::orders()
--- init
my $key = 't042-2';
my $first = main::first_request($key, '/orders?delay=2500');
IdemStress::wait_for("$key upstream", 10, sub { main::count($key) == 1 });
main::release($key);
is($first->(), '201 new 1', 'the first client gets its own answer');
wait_log(main::not_stored($key));
is(main::row($key), '4 1 1 0', 'the completion changed nothing');
my $r = main::order($key);
is("$r->{status} $r->{idem} $r->{tier} $r->{execution} $r->{epoch}",
   '201 new mysql 2 2', 'the retry runs anew, epoch 2, no replay');
$r = main::order($key);
is("$r->{status} $r->{replayed} $r->{execution}", '201 true 2',
   'the next one replays the new answer');
--- request
GET /count?key=t042-2
--- response_body chomp
2
--- no_error_log
[error]
--- timeout: 30

=== TEST 3: the module's own release and a renewal that lands after it: the renewal changes nothing, the retry runs at once
--- http_config eval
IdemTest::store_config(query_timeout => '1s')
--- config eval
main::orders()
--- init
my $key = 't042-3';
my $kh = key_hash_hex($key);
my $first = main::first_request($key, '/orders?status=503&delay=2500');
IdemStress::wait_for("$key upstream", 10, sub { main::count($key) == 1 });
# hold the row until a renewal waits for it, and take that renewal's text
my $pid = fork // die;
if ($pid == 0) {
    # its end is the KILL below
    open STDERR, '>', '/dev/null';
    eval { sql("BEGIN; SELECT state FROM idempotency_keys"
               . " WHERE key_hash = X'$kh' FOR UPDATE; DO SLEEP(20);"
               . " ROLLBACK") };
    POSIX::_exit(0);
}
my $renew;
IdemStress::wait_for('a renewal waiting for the row', 20, sub {
    ($renew) = sql_root($ENV{TEST_NGINX_MYSQL_SOCKET},
                        "SELECT INFO FROM information_schema.PROCESSLIST"
                        . " WHERE INFO LIKE 'UPDATE %lease_until%$kh%'"
                        . " AND ID <> CONNECTION_ID()") =~ /^(.+)$/m;
    $renew;
}, 0.05);
like($renew, qr/AND owner = X'[0-9A-F]{32}'$/i, "the owner's renewal");
sql_root($ENV{TEST_NGINX_MYSQL_SOCKET},
         "SELECT CONCAT('KILL ', ID) FROM information_schema.PROCESSLIST"
         . " WHERE INFO LIKE 'DO SLEEP(20)%'") =~ /^KILL (\d+)$/m
    or die "no lock holder\n";
sql_root($ENV{TEST_NGINX_MYSQL_SOCKET}, "KILL $1");
waitpid $pid, 0;
is($first->(), '503 new 1', 'the first client gets the 503');
IdemStress::wait_for('the release', 10, sub {
    main::row($key) =~ /^4 / || main::row($key) =~ / 1$/ });
# the renewal lands now, after the release
is(sql("$renew; SELECT ROW_COUNT()"), "0\n",
   'the late renewal changes no row');
is(main::row($key), '4 1 1 0', 'released, no lease, epoch 1');
my $r = main::order($key, '/orders?status=503&delay=2500');
is("$r->{status} $r->{idem} $r->{execution} $r->{epoch}", '503 new 2 2',
   'the retry runs at once (not 409), epoch 2');
--- request
GET /count?key=t042-3
--- response_body chomp
2
--- timeout: 40

=== TEST 4: the purge leaves a released row, and its epoch, until the key's retention ends; the next claim is epoch 2, not 1
--- http_config eval
IdemTest::store_config(query_timeout => '1s', purge => '1s')
--- config eval
main::orders()
--- init
my $key = 't042-4';
my $kh = key_hash_hex($key);
sql("DELETE FROM idempotency_keys WHERE key_hash = X'$main::ZERO'");
my $r = main::order($key, '/orders?status=503');
is("$r->{status} $r->{idem} $r->{epoch}", '503 new 1', 'epoch 1, answered 503');
IdemStress::wait_for('the release', 10, sub {
    main::row($key) =~ /^4 / || main::row($key) =~ / 1$/ });
# a row past its retention, made after the release: once it is gone, the
# purge has run over the released one too
my $gone = key_hash_hex('t042-4-expired');
sql("INSERT INTO idempotency_keys (key_hash, state, owner, fingerprint,"
    . " created_at, lease_until, expires_at) VALUES (X'$gone', 1,"
    . " X'0000000000000000000000000000000a', X'$main::ZERO',"
    . " UTC_TIMESTAMP(3),"
    . " UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) - INTERVAL 1 SECOND)");
IdemStress::wait_for('the purge', 20, sub {
    sql("SELECT COUNT(*) FROM idempotency_keys WHERE key_hash = X'$gone'")
    eq "0\n" }, 0.1);
is(main::row($key), '4 1 1 0', 'the purge kept the released row, epoch 1');
$r = main::order($key);
is("$r->{status} $r->{idem} $r->{execution} $r->{epoch}", '201 new 2 2',
   'the next claim: a new operation, epoch 2');
wait_state($key, 1);
# the key's retention ends: the purge removes it then
sql("UPDATE idempotency_keys SET state = 4, expires_at = UTC_TIMESTAMP(3)"
    . " WHERE key_hash = X'$kh'");
IdemStress::wait_for('the purge at the end of retention', 20, sub {
    main::row($key) eq '' }, 0.1);
pass('purged once its retention ended');
--- request
GET /count?key=t042-4
--- response_body chomp
2
--- no_error_log
[error]
--- timeout: 40

=== TEST 5: a request that outlives idempotency_ttl: its answer is kept, and the retry replays it
--- http_config eval
IdemTest::store_config(query_timeout => '500ms')
--- config eval
IdemTest::orders_location(idempotency_ttl => '2s',
    idempotency_lease => '1500ms', add_header => 'X-Idem', count => 1)
--- init
my $key = 't042-5';
my $r = main::order($key, '/orders?delay=3500');
is("$r->{status} $r->{idem} $r->{execution}", '201 new 1',
   'the first request, longer than its ttl');
wait_state($key, 1);
is(main::row($key), '1 1 1 0', 'completed, within a new retention');
$r = main::order($key, '/orders?delay=3500');
is("$r->{status} $r->{replayed} $r->{execution}", '201 true 1',
   'the retry replays it');
--- request
GET /count?key=t042-5
--- response_body chomp
1
--- no_error_log
[error]
--- timeout: 30
