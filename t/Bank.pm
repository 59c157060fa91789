# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

package Bank;

# The fence's bank for the tests (t/048, t/049): backend/app.py --bank-db
# on the suite's database, whose withdrawal (backend/withdraw.py) takes
# part in the fence, and what a test reads of it.
#
#   use Bank 'name';    starts the bank (log build/test/bank-name.log);
#                       it is killed when the test file ends
#
# The functions are exported into main, where the blocks' init code
# calls them (main::withdraw(...)).

use strict;
use warnings;

use File::Basename qw(dirname);
use Cwd qw(abs_path);
use IO::Socket::INET ();
use POSIX ();
use IdemTest ();
use TierTest ();

our $ROOT = abs_path(dirname(__FILE__) . '/..');
our $PORT = TierTest::free_port();
our ($LOG, $PID, $OWNER);

our @EXPORT = qw(start_bank restart_bank bank_log wait_bank_log open_account
                 ledger markers killed withdraw hdr orphan_row old_execution);

sub import {
    my ($class, $name) = @_;

    for my $f (@EXPORT) {
        no strict 'refs';
        *{"main::$f"} = \&{"Bank::$f"};
    }

    return unless defined $name;

    $LOG = "$ROOT/build/test/bank-$name.log";
    $OWNER = $$;

    # the log of this run only: the blocks wait for its lines
    unlink $LOG;
    start_bank();
}

# forked clients exec or _exit: only the test's process stops the bank
END {
    kill 'KILL', $PID if $PID && $OWNER && $$ == $OWNER;
}

# the interpreter that has Debian's python3-pymysql (scripts/deps.sh)
sub python {
    for my $py ($ENV{PYTHON} // (), '/usr/bin/python3', 'python3') {
        return $py if system("$py -c 'import pymysql' 2>/dev/null") == 0;
    }
    die "no python3 with pymysql (scripts/deps.sh installs python3-pymysql)\n";
}

our $PYTHON = python();

sub start_bank {
    my $pid = fork;
    die "fork: $!" unless defined $pid;

    if ($pid == 0) {
        no warnings 'exec';
        POSIX::setsid();
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', $LOG;
        open STDERR, '>&', \*STDOUT;
        exec $PYTHON, "$ROOT/backend/app.py", '--port', $PORT,
             '--bank-db', $ENV{TEST_NGINX_MYSQL_DB},
             '--bank-user', $ENV{TEST_NGINX_MYSQL_USER},
             '--bank-password', $ENV{TEST_NGINX_MYSQL_PASSWORD},
             '--bank-socket', $ENV{TEST_NGINX_MYSQL_SOCKET};
        POSIX::_exit(1);
    }

    $PID = $pid;

    IdemStress::wait_for("the bank on port $PORT", 15, sub {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                      PeerPort => $PORT);
        return $s ? 1 : 0 });
}

# the bank killed itself (die=): reap it, and start it again
sub restart_bank {
    IdemStress::wait_for('the bank to die', 10,
                         sub { waitpid($PID, POSIX::WNOHANG()) > 0 });
    start_bank();
}

sub bank_log { local $/; open my $f, '<', $LOG or return ''; <$f> }

sub wait_bank_log {
    my ($what, $re) = @_;
    IdemStress::wait_for($what, 30, sub { bank_log() =~ $re });
}

sub open_account {
    my ($a) = @_;
    IdemTest::sql("INSERT INTO accounts VALUES ('$a', 100)"
                  . " ON DUPLICATE KEY UPDATE balance = 100");
    IdemTest::sql("DELETE FROM withdrawals WHERE account = '$a'");
}

# balance, withdrawals and their epochs: what the bank's tables hold
sub ledger {
    my ($a) = @_;
    my $b = IdemTest::sql("SELECT balance FROM accounts WHERE id = '$a'");
    my $w = IdemTest::sql("SELECT GROUP_CONCAT(epoch ORDER BY id)"
                          . " FROM withdrawals WHERE account = '$a'");
    chomp($b, $w);
    return "$b $w";
}

# the markers of a key's current use: "epoch:state" in epoch order
sub markers {
    my ($key, $marker) = @_;
    $marker //= IdemTest::marker_hex($key);
    my $m = IdemTest::sql("SELECT GROUP_CONCAT(CONCAT(epoch, ':', state)"
                          . " ORDER BY epoch) FROM idempotency_fence"
                          . " WHERE marker = X'$marker'");
    chomp $m;
    return $m;
}

# the first request of $k, killed in the bank at $where: nginx's 502 to
# its client, the key unknown; then the bank starts again
sub killed {
    my ($k, $where, $uri) = @_;
    open_account($k);
    my $r = withdraw($k, "die=$where");
    Test::More::is($r->{status}, 502,
                   "killed at $where: nginx's 502, the outcome unknown");
    IdemTest::wait_state($k, 3);
    restart_bank();
}

# a withdrawal of 10 from the account named $key (at $o{uri}, with
# $o{headers}), with test hooks (X-Withdraw-Hook)
sub withdraw {
    my ($key, @hook) = @_;
    my %o = ref $hook[-1] ? %{ pop @hook } : ();
    return TierTest::http_req(key => $key,
        uri => ($o{prefix} // '') . "/withdraw?account=$key&amount=10",
        body => 'x', timeout => 20,
        headers => [(map { "X-Withdraw-Hook: $_" } @hook),
                    @{ $o{headers} // [] }]);
}

sub hdr { my ($r, $h) = @_; return ($r->{headers}{lc $h} // [''])->[0] }

# a key's row as an nginx that died left it: epoch 1, owner gone, state
# 0 with its lease ended (still executing, maybe) or 3 (sent, unknown);
# no life, so its marker is its key hash; $uri: the request's
sub orphan_row {
    my ($k, $state, $uri) = @_;
    my $kh = IdemTest::key_hash_hex($k);
    my $fp = IdemTest::fingerprint('POST',
                                   $uri // "/withdraw?account=$k&amount=10",
                                   'x');
    IdemTest::sql("INSERT INTO idempotency_keys (key_hash, state, owner,"
        . " epoch, fingerprint, created_at, lease_until, expires_at) VALUES"
        . " (X'$kh', $state, X'11111111111111111111111111111111', 1,"
        . " X'$fp', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) - INTERVAL 1 SECOND,"
        . " UTC_TIMESTAMP(3) + INTERVAL 1 DAY)");
    return $kh;
}

# epoch 1 of the key executing on the bank, sent by the nginx that died,
# with a hook; its client's pid, and once the hook has begun
sub old_execution {
    my ($k, $hook, $where) = @_;
    my $kh = IdemTest::key_hash_hex($k);
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        no warnings 'exec';
        exec 'curl', '-s', '-o', '/dev/null', '-X', 'POST',
             '--data-binary', 'x', '-H', "Idempotency-Marker: $kh",
             '-H', 'Idempotency-Epoch: 1', '-H', "X-Withdraw-Hook: $hook",
             "http://127.0.0.1:$PORT/withdraw?account=$k&amount=10";
        POSIX::_exit(1);
    }
    wait_bank_log("the old execution to pause at $where",
                  qr/pause at $where marker=$kh epoch=1/);
    return $pid;
}

1;
