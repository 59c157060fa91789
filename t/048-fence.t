# Fence or find (idempotency_fence): a backend that marks its execution
# of a claim's epoch inside its own business transaction (backend/
# withdraw.py: a withdrawal that decreases a balance and records itself,
# in one MariaDB transaction with the marker of mysql/fence.sql) lets the
# module decide an unknown outcome without an operator.  Each block
# faults the real backend (SIGKILL before its transaction, after the
# marker, after COMMIT; a pause past proxy_read_timeout; an old execution
# racing a takeover; concurrent fences) and checks, in the bank's own
# tables, that the withdrawal exists at most once, exactly once when a
# client saw success, and that the retries get a definite answer: the
# first retry once the fault is over (a backend restarted, a transaction
# committed), none after a second.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use POSIX ();
use Bank '048';

sub fence_location {
    my (%o) = @_;
    my $fence = $o{fence} // 'main';
    return qq{
    location /withdraw {
        idempotency main;
        idempotency_fence $fence;
        idempotency_lease 6s;
        idempotency_epoch_header Idempotency-Epoch;
        proxy_set_header Idempotency-Marker \$idempotency_marker;
        proxy_read_timeout 1s;
        proxy_pass http://127.0.0.1:$Bank::PORT;
        add_header X-Idem \$idempotency_status always;
    }
    location = /t { return 200 "checked\n"; }
};
}

# a block checks in its init code; its own request only ends it
block_defaults(config => fence_location(), request => "GET /t",
               error_code => 200, timeout => 40);

no_shuffle();
run_tests();

__DATA__

=== TEST 1: the backend killed before its transaction: the retry fences epoch 1 and runs the withdrawal once, at epoch 2
--- init
my $k = 't048-1';
main::killed($k, 'before');
my $r = main::withdraw($k);
is($r->{status}, 201, 'the first retry after the restart runs it');
is(main::hdr($r, 'X-Idem'), 'takeover', '... as a takeover of the fenced epoch');
like($r->{body}, qr/"epoch":2\b/, '... at epoch 2');
is(main::markers($k), '1:2,2:1', 'epoch 1 fenced, epoch 2 executed');
is(main::ledger($k), '90 2', 'one withdrawal, of epoch 2');
$r = main::withdraw($k);
is($r->{status}, 201, 'the next retry: the replay');
is(main::hdr($r, 'Idempotent-Replayed'), 'true', '... replayed');
is(main::ledger($k), '90 2', 'still one withdrawal');



=== TEST 2: killed after the marker, before COMMIT: MariaDB rolls it back, the fence wins, one withdrawal
--- init
my $k = 't048-2';
main::killed($k, 'marker');
my $r = main::withdraw($k);
is($r->{status}, 201, 'the first retry runs it');
is(main::markers($k), '1:2,2:1', 'the rolled back marker let the fence in');
is(main::ledger($k), '90 2', 'one withdrawal, of epoch 2');



=== TEST 3: killed after COMMIT, before its answer: the first retry finds the withdrawal's own answer, which every later retry gets, never a second withdrawal
--- init
my $k = 't048-3';
main::killed($k, 'commit');
my $ref = main::sql("SELECT CONCAT('/withdrawals/', id) FROM withdrawals"
                    . " WHERE account = '$k'");
chomp $ref;
my $r = main::withdraw($k);
is($r->{status}, 201, 'retry 1: the withdrawal\'s own 201');
is(main::hdr($r, 'X-Idem'), 'find', '... asked of the backend (find)');
is(main::hdr($r, 'Location'), $ref, '... for the withdrawal that ran');
like($r->{body}, qr/^\{"withdrawal":\d+,"account":"t048-3","amount":10,"balance":90,"epoch":1\}$/,
     '... its first answer, balance and epoch as then');
my $first = $r->{body};
like(main::bank_log(), qr/epoch=1 ran: answered from its record \(find\)/,
     'the bank answered from its record');
for my $i (2, 3) {
    $r = main::withdraw($k);
    is($r->{status}, 201, "retry $i: 201");
    is(main::hdr($r, 'Idempotent-Replayed'), 'true', "retry $i: replayed");
    is($r->{body}, $first, "retry $i: the same answer");
}
is(main::markers($k), '1:1', 'one marker, the backend\'s');
is(main::ledger($k), '90 1', 'one withdrawal, of epoch 1');



=== TEST 4: paused before its transaction past proxy_read_timeout: the retry fences and runs it; the old execution, resumed, is refused by its marker
--- init
my $k = 't048-4';
main::open_account($k);
my $r = main::withdraw($k, 'pause=6000');
is($r->{status}, 504, 'the first client: nginx\'s 504');
wait_state($k, 3);
$r = main::withdraw($k);
is($r->{status}, 201, 'the first retry runs it at once');
like($r->{body}, qr/"epoch":2\b/, '... at epoch 2');
my $kh = marker_hex($k);
main::wait_bank_log('the old execution to resume and be refused',
    qr/marker=$kh epoch=1 is fenced or ran: rolled back/);
is(main::markers($k), '1:2,2:1', 'epoch 1 fenced, epoch 2 executed');
is(main::ledger($k), '90 2', 'one withdrawal, of epoch 2');



=== TEST 5: paused after its marker, holding the lock past proxy_read_timeout: the fence cannot decide (502, retry hinted), the first retry after COMMIT gets the withdrawal's 201
--- init
my $k = 't048-5';
main::open_account($k);
my $r = main::withdraw($k, 'pause=6000&pause_at=marker');
is($r->{status}, 504, 'the first client: 504');
wait_state($k, 3);
my $kh = marker_hex($k);
$r = main::withdraw($k);
is($r->{status}, 502, 'a retry while the transaction is open: 502');
like($r->{body}, qr/outcome-unknown/, '... outcome-unknown');
is(main::hdr($r, 'Retry-After'), '1', '... with Retry-After: 1');
is(main::hdr($r, 'X-Should-Retry'), 'true', '... and X-Should-Retry: true');
main::wait_bank_log('the old execution to commit',
    qr/marker=$kh epoch=1 committed/);
$r = main::withdraw($k);
is($r->{status}, 201, 'the first retry after COMMIT: the withdrawal\'s 201');
like($r->{body}, qr/"balance":90,"epoch":1\}/, '... its own answer');
is(main::markers($k), '1:1', 'the backend\'s marker only');
is(main::ledger($k), '90 1', 'one withdrawal');
--- error_log
is undecided



=== TEST 6: a lease-end takeover racing a slow old execution that holds its marker: 409 until it commits, then its own 201; it ran once
--- init
my $k = 't048-6';
main::open_account($k);
# a claim whose owner died: its lease ended, epoch 1 still executing
main::orphan_row($k, 0);
my $pid = main::old_execution($k, 'pause=6000&pause_at=marker', 'marker');
my $r = main::withdraw($k);
is($r->{status}, 409, 'a retry while the old execution holds its marker: 409');
is(main::hdr($r, 'X-Should-Retry'), 'true', '... worth retrying');
waitpid($pid, 0);
$r = main::withdraw($k);
is($r->{status}, 201, 'the first retry after its COMMIT: the withdrawal\'s 201');
is(main::hdr($r, 'X-Idem'), 'find', '... found');
like($r->{body}, qr/"epoch":1\}/, '... the old one\'s answer');
is(main::ledger($k), '90 1', 'one withdrawal, the old one');



=== TEST 7: a lease-end takeover racing a slow old execution that has not reached its marker: the takeover runs it, the old one is refused
--- init
my $k = 't048-7';
main::open_account($k);
my $kh = main::orphan_row($k, 0);
my $pid = main::old_execution($k, 'pause=4000', 'before');
my $r = main::withdraw($k);
is($r->{status}, 201, 'the retry takes the dead owner\'s key over');
is(main::hdr($r, 'X-Idem'), 'takeover', '... a takeover');
like($r->{body}, qr/"epoch":2\b/, '... at epoch 2');
waitpid($pid, 0);
like(main::bank_log(), qr/marker=$kh epoch=1 is fenced or ran: rolled back/,
     'the old execution was refused by its marker');
is(main::markers($k), '1:2,2:1', 'epoch 1 fenced, epoch 2 executed');
is(main::ledger($k), '90 2', 'one withdrawal, of epoch 2');



=== TEST 8: concurrent fences of one unknown key (four retries at once): one runs it, the others wait or see it run
--- init
my $k = 't048-8';
main::open_account($k);
# epoch 1 sent, outcome unknown, and never reached the bank
main::orphan_row($k, 3);
pipe(my $rd, my $wr) or die "pipe: $!";
my @pids;
for my $i (1 .. 4) {
    my $pid = fork;
    if ($pid == 0) {
        close $rd;
        my $r = main::withdraw($k);
        syswrite $wr, "$r->{status}\n";
        POSIX::_exit(0);
    }
    push @pids, $pid;
}
close $wr;
waitpid($_, 0) for @pids;
my @st = sort map { chomp; $_ } <$rd>;
note('statuses: ' . join(' ', @st));
ok((grep { $_ == 201 } @st) >= 1, 'at least one client saw the withdrawal');
ok(!(grep { $_ != 201 && $_ != 409 } @st), 'the others: 201 (a replay) or 409');
is(main::markers($k), '1:2,2:1', 'epoch 1 fenced once, epoch 2 executed');
is(main::ledger($k), '90 2', 'one withdrawal');
my $r = main::withdraw($k);
is($r->{status}, 201, 'a retry after them all: the replay');



=== TEST 8b: the markers in a store of their own (its own connections, as for a backend's database): the same decision
--- http_config eval
IdemTest::store_config()
. "idempotency_store bank mysql=127.0.0.1:\$TEST_NGINX_MYSQL_PORT user=\$TEST_NGINX_MYSQL_USER password=\$TEST_NGINX_MYSQL_PASSWORD database=\$TEST_NGINX_MYSQL_DB;\n"
--- config eval
main::fence_location(fence => 'bank table=idempotency_fence')
--- init
my $k = 't048-8b';
main::killed($k, 'before');
my $r = main::withdraw($k);
is($r->{status}, 201, 'the first retry after the restart runs it');
is(main::markers($k), '1:2,2:1', 'fenced through the store "bank"');
is(main::ledger($k), '90 2', 'one withdrawal, of epoch 2');



=== TEST 9: without idempotency_fence the unknown outcome stays as before: 502 without Retry-After, X-Should-Retry: false
--- config eval
main::fence_location(fence => 'off')
--- init
main::open_account('t048-9');
--- more_headers
Idempotency-Key: t048-9
X-Withdraw-Hook: pause=2000
--- request eval
["POST /withdraw?account=t048-9&amount=10\nx", "POST /withdraw?account=t048-9&amount=10\nx"]
--- error_code eval
[504, 502]
--- response_headers eval
["X-Idem: new", "X-Idem: unknown\n!Retry-After\nX-Should-Retry: false\nStripe-Should-Retry: false"]
--- timeout: 20



=== TEST 10: idempotency_fence needs a store's name and a valid table
--- config
location /t {
    idempotency_fence main table=no-such;
}
--- must_die
--- error_log
invalid parameter "table=no-such" in "idempotency_fence"



=== TEST 11: idempotency_fence names a store that must be defined
--- config
location /t {
    idempotency main;
    idempotency_fence nosuch;
}
--- must_die
--- error_log
idempotency store "nosuch" is not defined
