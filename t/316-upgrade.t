# The upgrade of a key table made by the previous schema (issue 34): a
# table of mysql/schema.sql before issue 34 (rows clustered by key_hash,
# KEY ix_expires_at), served by nginx, with rows in every state made by
# requests; mysql/upgrade-expiry-order.sql, read from the repository and
# run while first requests and replays go on (none may fail: LOCK=NONE);
# then the table is the one today's mysql/schema.sql makes, every row is
# as it was, every key answers as it did (a replay byte for byte, 409,
# the takeover of a dead lease, 502 outcome-unknown, 410 outcome-executed,
# the reclaim of a released and of an expired key: both move their row,
# since expires_at is in the primary key now), the purge removes the
# expired rows and the listing reads by ix_state_created, unsorted.
#
# The blocks share the table keys_t316 (on the first MariaDB only), made
# anew when the file starts; each block's nginx sees the rows the one
# before it left.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use File::Basename qw(dirname);
use Cwd qw(abs_path);
use Time::HiRes ();
use POSIX ();

our $ROOT = abs_path(dirname(__FILE__) . '/..');
our $T = 'keys_t316';
our $FRESH = 'keys_t316_fresh';
our $SOCK = $ENV{TEST_NGINX_MYSQL_SOCKET};
our $ZERO = '00' x 32;
our $FIRST;

# mysql/schema.sql before issue 34 (commit 7da4604), kept here so that
# the test needs no history of the repository
our $OLD_SCHEMA = <<"SQL";
CREATE TABLE $T (
    key_hash     BINARY(32)       NOT NULL,
    state        TINYINT UNSIGNED NOT NULL DEFAULT 0,
    owner        BINARY(16)       NOT NULL,
    epoch        INT UNSIGNED     NOT NULL DEFAULT 1,
    fingerprint  BINARY(32)       NOT NULL,
    created_at   DATETIME(3)      NOT NULL,
    lease_until  DATETIME(3)      NOT NULL,
    expires_at   DATETIME(3)      NOT NULL,
    status       SMALLINT UNSIGNED NULL,
    response     LONGBLOB         NULL,
    PRIMARY KEY (key_hash),
    KEY ix_expires_at (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=binary
SQL

# a file of the repository with the key table's name replaced by $table
sub repo_sql {
    my ($file, $table) = @_;

    open my $fh, '<', "$ROOT/$file" or die "$ROOT/$file: $!";
    local $/;
    my $text = <$fh>;
    my $n = ($text =~ s/\bidempotency_keys\b/$table/g);
    die "$file names no table idempotency_keys\n" unless $n;
    return $text;
}

sub root { return sql_root($SOCK, @_) }

sub show_create {
    my ($table) = @_;
    my $t = root("SHOW CREATE TABLE $table");
    $t =~ s/^\Q$table\E\t//;
    $t =~ s/`\Q$table\E`/`TABLE`/;
    $t =~ s/\\n/\n/g;
    return $t;
}

root("DROP TABLE IF EXISTS $T, $FRESH; $OLD_SCHEMA");
# a location fences the table's keys: their use is named by a life
# (mysql/upgrade-life.sql, the documented step before such an nginx)
root(repo_sql('mysql/upgrade-life.sql', $T));
root(repo_sql('mysql/schema.sql', $FRESH));

# the keys, one for each state of the row (mysql/schema.sql)
our %K = map { $_ => "t316-$_" }
    qw(done big unknown released executed dead live exp1 exp2 exp3);

sub kh { return key_hash_hex($K{$_[0]}) }

sub count { IdemStress::backend_count($_[0]) }

sub state_of {
    my ($k) = @_;
    my $s = sql("SELECT state FROM $T WHERE key_hash = X'" . kh($k) . "'");
    chomp $s;
    return $s;
}

sub row_of {
    my ($k, $cols) = @_;
    my $s = sql("SELECT $cols FROM $T WHERE key_hash = X'" . kh($k) . "'");
    chomp $s;
    return $s;
}

sub wait_row {
    my ($k, $state) = @_;
    IdemStress::wait_for("state $state of $K{$k}", 15,
                         sub { state_of($k) eq $state }, 0.1);
}

# the request of key $k at $uri, as every retry of it sends it
our %URI = (
    done     => '/orders',
    big      => '/orders?size=50000',
    unknown  => '/orders?delay=4000',
    released => '/orders?status=500',
    executed => '/fenced?delay=4000',
    dead     => '/leased?delay=5000',
    live     => '/leased?delay=20000',
    (map { ("exp$_" => '/short') } 1 .. 3),
);

sub send_key {
    my ($k) = @_;
    return http_req(key => $K{$k}, uri => $URI{$k}, body => 'x',
                    timeout => 30);
}

sub problem {
    my ($r) = @_;
    my ($t) = $r->{body} =~ /"type":"urn:ngx-idempotency:problem:([a-z-]+)"/;
    return "$r->{status} " . ($t // '-');
}

# what a retry of each key that a retry does not change answers
sub answers {
    my ($what) = @_;

    my $r = send_key('done');
    my $b = strip_volatile($r->{raw});
    Test::More::like($b, qr/\r\nIdempotent-Replayed: true\r\n/,
         "$what: done: a replay");
    $b =~ s/\r\nIdempotent-Replayed: true(?=\r\n)//;
    $b =~ s/\r\nX-Idem: [^\r]*//;
    Test::More::is($b, $main::FIRST, "$what: done: the first answer, byte for byte");
    Test::More::is(main::problem(send_key('big')), '410 response-not-stored',
       "$what: big (not stored): 410 response-not-stored");
    Test::More::is(main::problem(send_key('unknown')), '502 outcome-unknown',
       "$what: unknown: 502 outcome-unknown");
    my $x = send_key('executed');
    Test::More::is(main::problem($x), '410 outcome-executed',
       "$what: executed: 410 outcome-executed");
    Test::More::like($x->{body}, qr/ref-t316/, "$what: ... with the marker's result");
    Test::More::is(count($K{$_}), 1, "$what: $_ ran once")
        for qw(done big unknown executed);
}

# the rows of the file's keys, all their columns (the response's digest),
# but the lease of the one whose owner renews it
sub rows {
    my $in = join ', ', map { "X'" . kh($_) . "'" } sort keys %K;
    return sql("SELECT HEX(key_hash), state, HEX(owner), epoch,"
               . " HEX(fingerprint), created_at,"
               . " IF(key_hash = X'" . kh('live') . "', '-', lease_until),"
               . " expires_at, status, MD5(response) FROM $T"
               . " WHERE key_hash IN ($in, X'$ZERO') ORDER BY key_hash");
}

# first requests and their replays in a child, until the file
# "$file.stop" exists: one line per request, "start end kind status X-Idem
# ok|BAD", in $file
sub load_start {
    my ($file) = @_;

    unlink $file, "$file.stop";
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    return $pid if $pid;

    open my $log, '>>', $file or POSIX::_exit(1);
    my $old = select $log; $| = 1; select $old;
    for (my $i = 1; !-e "$file.stop"; $i++) {
        for my $kind (qw(first replay)) {
            my $t0 = Time::HiRes::time();
            my $r = http_req(key => "t316-load-$i", body => 'x',
                             timeout => 20);
            my $ok = $r->{status} == 201
                     && ($kind eq 'first'
                         ? $r->{raw} !~ /\r\nIdempotent-Replayed:/
                         : $r->{raw} =~ /\r\nIdempotent-Replayed: true\r\n/);
            printf $log "%.6f %.6f %s %s %s %s\n", $t0, Time::HiRes::time(),
                   $kind, $r->{status}, $r->{idem} || '-', $ok ? 'ok' : 'BAD';
        }
    }
    close $log;
    POSIX::_exit(0);
}

sub load_stop {
    my ($pid, $file) = @_;
    open my $fh, '>', "$file.stop" or die "$file.stop: $!";
    close $fh;
    waitpid $pid, 0;
}

sub load_lines {
    my ($file) = @_;
    my @l;
    if (open my $fh, '<', $file) {
        @l = map { [ split ' ' ] } <$fh>;
    }
    return @l;
}

sub config {
    return q{
    location /orders {
        idempotency main;
        idempotency_max_response_size 10k;
        proxy_read_timeout 2s;
        proxy_pass http://backend;
        add_header X-Idem $idempotency_status always;
    }
    location /fenced {
        idempotency main;
        idempotency_fence main find=off;
        idempotency_epoch_header Idempotency-Epoch;
        proxy_read_timeout 2s;
        proxy_pass http://backend;
        add_header X-Idem $idempotency_status always;
    }
    location /leased {
        idempotency main;
        idempotency_lease 6s;
        proxy_read_timeout 60s;
        proxy_pass http://backend;
        add_header X-Idem $idempotency_status always;
    }
    location /short {
        idempotency main;
        idempotency_ttl 7s;
        idempotency_lease 6s;
        proxy_pass http://backend;
        add_header X-Idem $idempotency_status always;
    }
    location = /admin {
        idempotency_admin main;
    }
    location = /t {
        return 200 "checked\n";
    }
};
}

block_defaults(config => config(), request => "GET /t",
               response_body => "checked\n", timeout => 60);

master_on();
no_shuffle();
run_tests();

__DATA__

=== TEST 1: a table made by the previous schema, served: a row in every state, made by requests; the purge lease
--- http_config eval
IdemTest::store_config(table => $main::T, purge => '1s')
--- init
like(main::show_create($main::T), qr/PRIMARY KEY \(`key_hash`\),\n  KEY `ix_expires_at`/,
     'TEST 1: the previous schema');
IdemStress::wait_for('the purge lease', 15, sub {
    sql("SELECT COUNT(*) FROM $main::T WHERE key_hash = X'$main::ZERO'")
    eq "1\n" }, 0.1);
# 1: completed, its answer kept to compare the replays with
my $r = main::send_key('done');
is("$r->{status} $r->{idem}", '201 new', 'TEST 1: done: executed');
($main::FIRST = strip_volatile($r->{raw})) =~ s/\r\nX-Idem: [^\r]*//;
main::wait_row('done', 1);
# 2: completed, too large to store
is(main::send_key('big')->{status}, 201, 'TEST 1: big: executed');
main::wait_row('big', 2);
# 3: unknown: the backend's answer came after proxy_read_timeout
is(main::send_key('unknown')->{status}, 504, 'TEST 1: unknown: 504');
main::wait_row('unknown', 3);
# 4: released by its 5xx
is(main::send_key('released')->{status}, 500, 'TEST 1: released: 500');
main::wait_row('released', 4);
# 5: unknown, then the backend's marker of epoch 1 (written here, as a
# backend's transaction would: t/048-fence.t has the backend do it); the
# retry's fence finds it: executed
is(main::send_key('executed')->{status}, 504, 'TEST 1: executed: 504');
main::wait_row('executed', 3);
sql("INSERT INTO idempotency_fence (marker, epoch, state, result,"
    . " created_at) VALUES (X'"
    . marker_hex($main::K{executed}, undef, $main::T) . "', 1, 1,"
    . " 'ref-t316', UTC_TIMESTAMP(3))");
is(main::problem(main::send_key('executed')), '410 outcome-executed',
   'TEST 1: executed: the fence found the marker');
main::wait_row('executed', 5);
# 0, its owner dead: the worker that holds the key is killed
my $pid = bg_request('POST', $main::URI{dead}, $main::K{dead}, 'x', 0);
main::wait_row('dead', 0);
my $pidfile = "$ENV{TEST_NGINX_SERVER_ROOT}/logs/nginx.pid";
open my $fh, '<', $pidfile or die "$pidfile: $!";
chomp(my $master = <$fh>);
my @workers = TierTest::_children($master);
is(scalar @workers, 1, 'TEST 1: one worker');
kill 'KILL', @workers;
waitpid $pid, 0;
is(main::state_of('dead'), '0', 'TEST 1: dead: left in progress');
main::answers('TEST 1');
--- error_log eval
qr/\[alert\] .*worker process \d+ exited on signal 9/
--- no_error_log
[crit]
[emerg]

=== TEST 2: mysql/upgrade-expiry-order.sql, run from the file while first requests and replays go on: none fails; the table is today's schema.sql's, every row as it was
--- http_config eval
IdemTest::store_config(table => $main::T, purge => 'off')
--- init
# expired by the upgrade
for my $k (qw(exp1 exp2 exp3)) {
    is(main::send_key($k)->{status}, 201, "TEST 2: $k: executed");
}
# 150 000 completed keys of other clients, so that the rebuild lasts
main::root("INSERT INTO $main::T (key_hash, state, owner, epoch,"
    . " fingerprint, created_at, lease_until, expires_at, status, response)"
    . " SELECT UNHEX(SHA2(CONCAT('t316-fill-', seq), 256)), 1, X'"
    . ('5a' x 16) . "', 1, X'" . ('00' x 32) . "', UTC_TIMESTAMP(3),"
    . " UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL 1 DAY, 201,"
    . " REPEAT('r', 300) FROM seq_1_to_150000");
IdemStress::wait_for('the dead lease to end and three keys to expire', 20,
    sub { sql("SELECT COUNT(*) FROM $main::T WHERE key_hash IN (X'"
              . join("', X'", map { main::kh($_) } qw(exp1 exp2 exp3))
              . "') AND expires_at <= UTC_TIMESTAMP(3) OR key_hash = X'"
              . main::kh('dead') . "' AND lease_until <= UTC_TIMESTAMP(3)")
          eq "4\n" }, 0.2);
# 0, its owner alive: held by the backend for 20 s
my $live = bg_request('POST', $main::URI{live}, $main::K{live}, 'x', 0);
main::wait_row('live', 0);
is(main::problem(main::send_key('live')), '409 request-in-progress',
   'TEST 2: live: 409 before');
main::answers('TEST 2, before');
is(main::root("SELECT state, COUNT(*) FROM $main::T WHERE key_hash IN (X'"
              . join("', X'", map { main::kh($_) } sort keys %main::K)
              . "') GROUP BY state"),
   "0\t2\n1\t4\n2\t1\n3\t1\n4\t1\n5\t1\n", 'TEST 2: a row in every state');
my $rows = main::rows();
my $load_log = "$main::ROOT/build/test/t316-load.log";
my $load = main::load_start($load_log);
IdemStress::wait_for('the load to begin', 20,
                     sub { main::load_lines($load_log) >= 6 }, 0.1);
my $t0 = Time::HiRes::time();
main::root(main::repo_sql('mysql/upgrade-expiry-order.sql', $main::T));
my $t1 = Time::HiRes::time();
my $after = main::load_lines($load_log);
IdemStress::wait_for('the load to go on', 20,
                     sub { main::load_lines($load_log) >= $after + 6 }, 0.1);
main::load_stop($load, $load_log);
my @l = main::load_lines($load_log);
is(join('', map { "@$_\n" } grep { $_->[5] ne 'ok' } @l), '',
   'TEST 2: every first request and replay answered 201 (' . @l . ')');
# requests sent after the ALTER began and answered before it ended
for my $kind (qw(first replay)) {
    my $n = grep { $_->[2] eq $kind && $_->[0] > $t0 && $_->[1] < $t1 } @l;
    cmp_ok($n, '>', 0, sprintf('TEST 2: %ss answered during the %.1f s'
                               . ' of the ALTER (%d)', $kind, $t1 - $t0, $n));
}
is(main::show_create($main::T), main::show_create($main::FRESH),
   "TEST 2: the table is the one of today's schema.sql");
is(main::rows(), $rows, 'TEST 2: every row as it was');
is(main::problem(main::send_key('live')), '409 request-in-progress',
   'TEST 2: live: 409 after');
waitpid $live, 0;
main::wait_row('live', 1);
my $r = main::send_key('live');
like($r->{raw}, qr/^HTTP\/1\.1 201 .*\r\nIdempotent-Replayed: true\r\n/s,
     'TEST 2: live: completed by its owner, replayed');
is(main::count($main::K{live}), 1, 'TEST 2: live: ran once');
--- no_error_log
[error]

=== TEST 3: after the upgrade every key answers as before; the dead lease taken over, the released and an expired key reclaimed (their rows move)
--- http_config eval
IdemTest::store_config(table => $main::T, purge => 'off')
--- init
main::answers('TEST 3');
my $e0 = main::row_of('dead', 'expires_at');
my $r = main::send_key('dead');
is("$r->{status} $r->{idem}", '201 takeover', 'TEST 3: dead: taken over');
is(main::count($main::K{dead}), 2, 'TEST 3: dead: ran again');
is(main::row_of('dead', 'state, epoch, expires_at'), "1\t2\t$e0",
   'TEST 3: dead: epoch 2, its retention kept');
# a reclaim starts a new retention: the row moves.  The released key's
# request answers 500 again, so it is released again, at epoch 2
for my $c ([ released => 500, 4 ], [ exp1 => 201, 1 ]) {
    my ($k, $status, $state) = @$c;
    my $e = main::row_of($k, 'expires_at');
    my $r = main::send_key($k);
    is("$r->{status} $r->{idem}", "$status new", "TEST 3: $k: reclaimed");
    is(main::count($main::K{$k}), 2, "TEST 3: $k: ran again");
    main::wait_row($k, $state);
    is(main::row_of($k, "epoch, expires_at > '$e'"), "2\t1",
       "TEST 3: $k: epoch 2, a new retention (the row moved)");
}
like(main::send_key('exp1')->{raw}, qr/\r\nIdempotent-Replayed: true\r\n/,
     'TEST 3: exp1: replayed');
--- no_error_log
[error]

=== TEST 4: the purge removes the expired keys left; the listing reads by ix_state_created: no scan, no sort
--- http_config eval
IdemTest::store_config(table => $main::T, purge => '1s')
--- init
# the listing, on a table of 150 000 rows more: no sort, few rows read
my @c = qw(Handler_read_rnd_next Handler_read_next Sort_rows Sort_scan
           Sort_range);
my $s0 = IdemStress::server_status($main::SOCK, @c);
my $l = admin('GET', 'list=unknown');
my $s1 = IdemStress::server_status($main::SOCK, @c);
is_deeply([ map { $_->{key_hash} } @{ $l->{json}{keys} // [] } ],
          [ main::kh('unknown') ], 'TEST 4: list=unknown: the unknown key');
my %d = map { $_ => $s1->{$_} - $s0->{$_} } @c;
is("$d{Sort_rows} $d{Sort_scan} $d{Sort_range}", '0 0 0',
   'TEST 4: nothing sorted');
cmp_ok($d{Handler_read_rnd_next} + $d{Handler_read_next}, '<', 1000,
       'TEST 4: a few rows read, not 150 000');
# the purge: the two expired keys left (the purge lease of TEST 1's nginx
# has ended)
IdemStress::wait_for('the purge', 20, sub {
    sql("SELECT COUNT(*) FROM $main::T WHERE key_hash IN (X'"
        . main::kh('exp2') . "', X'" . main::kh('exp3') . "')") eq "0\n"
}, 0.2);
like(error_log(), qr/purged 2 expired rows/, 'TEST 4: purged');
is(sql("SELECT COUNT(*) FROM $main::T WHERE key_hash = X'$main::ZERO'"),
   "1\n", 'TEST 4: the purge lease row stays');
--- no_error_log
[error]
