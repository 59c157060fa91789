# Fault injection.  A second private MariaDB (build/stress/faultdb, port
# 19306) is stopped, frozen and has its connections killed, so the suite's
# own server is never disturbed.  Two nginx instances (2 workers each) run
# in front of the test backend; the upstream refuses, times out, resets and
# fails; clients go away; a worker is SIGKILLed; nginx is reloaded and
# binary-upgraded under load.
#
# In every case: no worker crash (no "exited on signal" other than the
# worker killed on purpose), no second execution where the design promises
# one, no key left claimed forever (a retry after the lease gets an
# answer), and the module recovers without a restart.

use strict;
use warnings;

use Digest::SHA qw(sha256_hex);
use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(time sleep);

use lib 't/stress';
use IdemStress;

IdemStress::begin_file();

my $P = port(181);      # nginx "fault1"
my $P2 = port(182);     # nginx "fault2", same store
my $DEAD = port(99);    # nothing listens here
my $tag = "f$$-" . int(time);
my $t_start = time;
my (%fig, $db, @ngx, $ngx, $ngx2);

END {
    $_->stop for grep { defined } @ngx;
    $db->stop if $db;
}

$db = IdemStress::DB->new;
$db->start(fresh => 1);

sub http_conf {
    my ($port) = @_;

    my $dbp = $db->{port};

    return store_line('f', $dbp, pool => 16, connect_timeout => '500ms',
                      query_timeout => '2s')
         . store_line('patient', $dbp, pool => 16, connect_timeout => '5s',
                      query_timeout => '10s')
         . store_line('kq', $dbp, pool => 16, connect_timeout => '5s',
                      query_timeout => '1s')
         . store_line('quick', $dbp, pool => 4, connect_timeout => '300ms',
                      query_timeout => '500ms')
         . server_block($port, <<"SERVER");
        add_header X-Idem \$idempotency_status always;
        proxy_read_timeout 30s;

        location /orders {
            idempotency f;
            proxy_pass http://backend;
        }
        location /patient {
            idempotency patient;
            proxy_pass http://backend;
        }
        location /ignore {
            idempotency patient;
            proxy_ignore_client_abort on;
            proxy_pass http://backend;
        }
        location /short {
            idempotency f;
            idempotency_lease 6s;
            proxy_pass http://backend;
        }
        location /kq {
            idempotency kq;
            idempotency_lease 3s;
            proxy_pass http://backend;
        }
        location /outage {
            idempotency quick;
            idempotency_lease 30s;
            proxy_pass http://backend;
        }
        location /refused {
            idempotency f;
            proxy_pass http://127.0.0.1:$DEAD;
        }
        location /slowup {
            idempotency f;
            proxy_read_timeout 1s;
            proxy_pass http://backend;
        }
        location /keep5xx {
            idempotency f;
            idempotency_store_5xx on;
            proxy_pass http://backend;
        }
        location = /metrics { idempotency_metrics; }
SERVER
}

$ngx = IdemStress::Nginx->start(name => 'fault1', port => $P,
                                http => http_conf($P));
$ngx2 = IdemStress::Nginx->start(name => 'fault2', port => $P2,
                                 http => http_conf($P2));
@ngx = ($ngx, $ngx2);

my %killed;     # pids killed on purpose
my $nkey = 0;

# ---------------------------------------------------------------- helpers

sub fresh { return "$tag-" . shift() . '-' . ++$nkey }

sub idem { IdemStress::hdr($_[0], 'X-Idem') // '-' }
sub replayed { (IdemStress::hdr($_[0], 'Idempotent-Replayed') // '') eq 'true' }
sub desc { my $r = shift; $r->{error} ? "error: $r->{error}"
                          : "$r->{status} " . idem($r) }

# (state, lease left in ms) of a key's row, or () if there is none
sub row {
    my ($key) = @_;
    my $out = $db->sql("SELECT state, TIMESTAMPDIFF(MICROSECOND,"
        . " UTC_TIMESTAMP(6), lease_until) DIV 1000,"
        . " (state = 4 OR expires_at <= UTC_TIMESTAMP(3))"
        . " FROM idempotency_keys"
        . " WHERE key_hash = X'" . key_hash_hex($key) . "'");
    return split /\s+/, $out;
}

# a release frees the row at once (it stays for its epoch, until its
# retention ends): gone, released, or past its retention
sub wait_row_gone {
    my ($key, $timeout) = @_;
    return eval { wait_for("the row of $key to go", $timeout // 20,
                           sub { my ($state, $left, $expired) = row($key);
                                 !defined $state || $expired }, 0.1); 1 };
}

sub wait_row_state {
    my ($key, $want, $timeout) = @_;
    return eval { wait_for("the row of $key in state $want", $timeout // 20,
                           sub { my ($state) = row($key);
                                 defined $state && $state == $want }, 0.1);
                  1 };
}

sub wait_lease_over {
    my ($key, $timeout) = @_;
    wait_for("the lease of $key to end", $timeout // 60, sub {
        my ($state, $left) = row($key);
        return !defined $state || $state != 0 || $left <= 0;
    }, 0.1);
}

# the module answers again: a fresh key is executed
sub recovered {
    my ($what, $port) = @_;
    my $t0 = time;
    my $r;
    my $ok = eval {
        wait_for("the module to recover ($what)", 60, sub {
            $r = post($port // $P, '/orders', fresh('probe'), timeout => 60);
            return !$r->{error} && $r->{status} == 201;
        }, 0.2);
        1;
    };
    ok($ok, "$what: the module recovers without a restart")
        or diag("last probe: " . desc($r));
    return time - $t0;
}

# retries keys until each gets an answer that is not 409 / 503 / a
# transport error; returns ({key => response}, [keys still stuck])
sub settle {
    my ($bodies, %o) = @_;
    my %left = %$bodies;
    my %final;
    my $deadline = time + ($o{timeout} // 60);

    while (%left) {
        my @k = sort keys %left;
        my @res = http_many([ map { { port => $o{port} // $P,
                                      method => 'POST', uri => $o{uri},
                                      key => $_, body => $left{$_} } } @k ],
                            timeout => 60);
        for my $i (0 .. $#k) {
            my $r = $res[$i];
            next if $r->{error} || $r->{status} == 409
                    || $r->{status} == 503;
            $final{$k[$i]} = $r;
            delete $left{$k[$i]};
        }
        last if !%left || time > $deadline;
        sleep 0.25;
    }

    return (\%final, [sort keys %left]);
}

# Checks a load run: statuses, no transport errors (unless allowed), and,
# after settling, every key executed exactly once with replays identical
# to the executed response.
sub check_run {
    my ($name, $rows, %o) = @_;

    my ($p, $st, $by_key) = IdemStress::check_load($rows,
        allowed => $o{allowed} || {}, errors_ok => $o{errors_ok});

    my %body = map { $_->{key} => $_->{body} } @$rows;
    my ($final, $stuck) = settle(\%body, uri => $o{uri},
                                 timeout => $o{settle} // 60);

    push @$p, "$_: no answer but 409/503 even after the lease" for @$stuck;

    for my $key (sort keys %$final) {
        my $r = $final->{$key};
        my @orig = grep { $_->{status} == 201 && !$_->{replayed} }
                   @{ $by_key->{$key} };

        if ($r->{status} != 201) {
            push @$p, "$key: final answer " . desc($r);
        } elsif (@orig && !replayed($r)) {
            push @$p, "$key: executed again by a later retry (" . idem($r)
                      . ")";
        } elsif (@orig && sha256_hex($r->{body}) ne $orig[0]{body_sha}) {
            push @$p, "$key: the replay differs from the executed response";
        }

        my $c = backend_count($key);
        push @$p, "$key: executed $c times upstream" if $c != 1;
    }

    ok(!@$p, "$name: every key executed once, replays identical, none "
             . "stuck") or diag(join "\n", @$p[0 .. ($#$p > 20 ? 20 : $#$p)]);

    $st->{stuck} = scalar @$stuck;
    return $st;
}

# runs one scenario; one that dies is a failed test, and the next one
# starts clean (load generators stopped, servers up)
sub scenario {
    my ($code) = @_;
    return if eval { $code->(); 1 };
    my $err = $@;
    fail("a scenario died: $err");
    IdemStress::load_stop_all();
    for my $n (@ngx) {
        next if eval { $n->check_master; 1 };
        $n->stop;
        $n->restart;
    }
    $db->start if !$db->pid;
}

sub no_crash {
    my ($what) = @_;
    for my $n (@ngx) {
        my @c = $n->crashes(keys %killed);
        ok(!@c, "$what: no worker of $n->{name} crashed")
            or diag(join "\n", @c);
    }
}

sub figure {
    my ($name, $text) = @_;
    $fig{$name} = $text;
    diag("$name: $text");
}

sub stats_text {
    my ($st) = @_;
    return join ', ', map { "$_ $st->{$_}" }
           grep { defined $st->{$_} } sort keys %$st;
}

# ------------------------------------------- 1. MariaDB stopped, restarted

for my $case (['MariaDB stopped and started under load', 'stop'],
              ['MariaDB killed (SIGKILL) and restarted under load', 'crash'])
{
    scenario(sub {
        my ($name, $how) = @$case;
        my $lg = IdemStress::load_start(ports => [$P, $P2], uri =>
            '/orders?delay=50', prefix => fresh($how), keys => 3, dups => 3);
        IdemStress::load_more($lg, 18);

        my $t0 = time;
        $db->$how;

        # hold the outage until the module has been seen failing
        my $ok = eval { wait_for('a 503 while the store is down', 30, sub {
            my $r = post($P, '/orders', fresh('probe'), timeout => 60);
            !$r->{error} && $r->{status} == 503;
        }, 0.1); 1 };
        ok($ok, "$name: requests get 503 while the store is down");
        IdemStress::load_more($lg, 9);

        $db->start;
        my $down = time - $t0;
        my $rec = recovered($name);
        recovered("$name, second nginx", $P2);
        IdemStress::load_more($lg, 18);

        my $rows = IdemStress::load_stop($lg);
        my $st = check_run($name, $rows, uri => '/orders?delay=50',
                           allowed => { 503 => 1 });
        no_crash($name);
        figure($name, sprintf("store down %.1fs, module answering again %.1fs"
                              . " after the restart; %s", $down, $rec,
                              stats_text($st)));
    });
}

# ---------------------------------------------- 2. MariaDB frozen (SIGSTOP)

scenario(sub {
    my $name = 'MariaDB frozen with SIGSTOP under load';
    my $lg = IdemStress::load_start(ports => [$P, $P2], uri =>
        '/orders?delay=50', prefix => fresh('freeze'), keys => 3, dups => 3);
    IdemStress::load_more($lg, 18);

    my $t0 = time;
    $db->freeze;

    my $ok = eval { wait_for('a 503 while the store hangs', 30, sub {
        my $r = post($P, '/orders', fresh('probe'), timeout => 60);
        !$r->{error} && $r->{status} == 503;
    }, 0.1); 1 };
    ok($ok, "$name: requests get 503 (query_timeout) while it hangs");

    $db->thaw;
    my $frozen = time - $t0;
    my $rec = recovered($name);
    IdemStress::load_more($lg, 18);

    # a claim the module gave up on may still run once the server wakes
    # up; such a key is held until its lease ends (30 s), then answered
    my $rows = IdemStress::load_stop($lg);
    my $st = check_run($name, $rows, uri => '/orders?delay=50',
                       allowed => { 503 => 1 }, settle => 90);
    no_crash($name);
    figure($name, sprintf("frozen %.1fs, module answering %.1fs after "
                          . "SIGCONT; %s", $frozen, $rec, stats_text($st)));
});

# ------------------------------- 3. KILL of the module's connections

scenario(sub {
    my $name = 'KILL of the module connections during claims';

    # warm the pools so the killed connections are reused ones
    post($P, '/patient', fresh('warm'), timeout => 60) for 1 .. 4;

    $db->lock_table;
    my $lg = IdemStress::load_start(ports => [$P, $P2], uri =>
        '/patient?delay=50', prefix => fresh('killc'), keys => 3, dups => 3,
        waves => 1);

    my $q = eval { wait_for('claims queued behind the lock', 30, sub {
        my @q = grep { $_->[1] =~ /^(Query|Execute)$/ }
                @{ $db->module_conns };
        @q >= 2 ? \@q : 0 }, 0.05) };
    ok($q, "$name: claims are waiting in the server");

    my @all = @{ $db->module_conns };
    $db->root_sql("KILL $_->[0]") for @all;
    $db->unlock_table;

    my $rows = IdemStress::load_stop($lg);
    my $st = check_run($name, $rows, uri => '/patient?delay=50',
                       allowed => { 503 => 1 });
    my $rec = recovered($name);
    no_crash($name);
    figure($name, sprintf("%d connections killed; %s", scalar @all,
                          stats_text($st)));
});

# one request of a fresh key on $uri whose completion UPDATE, held
# behind the table lock, is killed by "$kill ID" ('KILL' or 'KILL
# QUERY'); returns the key and the rows of the load (one request)
sub kill_the_completion {
    my ($name, $prefix, $uri, $kill) = @_;

    my $key = fresh($prefix);
    my $lg = IdemStress::load_start(ports => [$P], uri => $uri,
        prefix => $key, keys => 1, dups => 1, waves => 1);
    my $k = "$key-w1-k1";

    wait_for("$k upstream", 30, sub { backend_count($k) == 1 });
    $db->lock_table;

    my $upd = eval { wait_for('the completion UPDATE', 30, sub {
        my @q = grep { $_->[1] =~ /^(Query|Execute)$/
                       && $_->[3] =~ /^UPDATE.*SET state/ }
                @{ $db->module_conns };
        @q ? \@q : 0 }, 0.05) };
    ok($upd, "$name: the completion waits in the server");
    $db->root_sql("$kill $_->[0]") for @{ $upd || [] };
    $db->unlock_table;

    my $rows = IdemStress::load_stop($lg);
    is($rows->[0]{status}, 201, "$name: the client got its response");

    return ($k, $rows);
}

scenario(sub {
    my $name = 'KILL of the connection writing the response';
    my ($k, $rows) = kill_the_completion($name, 'killw',
                                         '/patient?delay=3000', 'KILL');

    my ($final, $stuck) = settle({ $k => $rows->[0]{body} },
                                 uri => '/patient?delay=3000', timeout => 60);
    my $r = $final->{$k};
    ok($r && $r->{status} == 201 && replayed($r)
       && sha256_hex($r->{body}) eq $rows->[0]{body_sha},
       "$name: the response was stored after all and is replayed")
        or diag("final: " . ($r ? desc($r) : 'none'));
    is(backend_count($k), 1, "$name: executed once");
    no_crash($name);
});

scenario(sub {
    # KILL QUERY interrupts the statement (1317) but leaves the connection:
    # the conditional UPDATE is safe to repeat, so it must be retried
    my $name = 'KILL QUERY of the completion UPDATE';
    my ($k, $rows) = kill_the_completion($name, 'killq', '/kq?delay=2000',
                                         'KILL QUERY');

    # after the lease (3 s) a retry must replay, not run the order again
    wait_lease_over($k, 30);
    my $r = post($P, '/kq?delay=2000', $k, body => $rows->[0]{body},
                 timeout => 60);
    ok($r->{status} == 201 && replayed($r),
       "$name: after the lease a retry replays (not executed again)")
        or diag("retry: " . desc($r) . "; error.log: "
                . join("\n", grep { /\Q$k\E/ } split /\n/, $ngx->error_log));
    is(backend_count($k), 1, "$name: executed once");
    no_crash($name);
});

# ---------------------------------------------------------- 4. upstream

# a burst of identical requests; every forwarded one (X-Idem new or
# takeover) is one execution, a 409 never is, and the key ends up free,
# stored, or (sent, and no complete answer) of unknown outcome
sub upstream_case {
    my ($name, $uri, %o) = @_;

    my $key = fresh('up');
    my @res = http_many([ map { { port => $P, method => 'POST', uri => $uri,
                                  key => $key, body => 'x' } } 1 .. 10 ],
                        timeout => 60);

    # (a 503 from the claim-release race is the subject of its own test)
    my $raced = grep {
        /claim of key \Q${\ IdemStress::key_id($key)}\E failed: the claim returned no row/ }
                split /\n/, $ngx->error_log;
    my (%by, @bad);
    for my $r (@res) {
        $by{$r->{status} // 'none'}++;
        next if $raced && ($r->{status} // 0) == 503 && idem($r) eq 'error';
        push @bad, desc($r) unless $o{ok}->($r) || ($r->{status} // 0) == 409;
    }
    my $fwd = grep { idem($_) =~ /^(new|takeover)$/ } @res;

    ok(!@bad, "$name: each answer is the upstream's failure or a 409")
        or diag(join "\n", @bad);
    cmp_ok($fwd, '>=', 1, "$name: forwarded at least once");

    if ($o{executes}) {
        is(backend_count($key), $fwd, "$name: one execution per forwarded "
           . "request, none for a 409");
    }

    if ($o{unknown}) {
        # sent, and no complete response: recorded, never run again
        ok(wait_row_state($key, 3), "$name: the outcome is recorded as "
           . "unknown");
        my $r = post($P, $uri, $key, timeout => 60);
        ok(($r->{status} // 0) == 502
           && ($r->{body} // '') =~ /problem:outcome-unknown/,
           "$name: a retry learns the outcome is unknown")
            or diag('retry: ' . desc($r));
        is(backend_count($key), $fwd, "$name: not executed again");

    } elsif ($o{stored}) {
        my ($final) = settle({ $key => 'x' }, uri => $uri);
        my $f = $final->{$key};
        ok($f && replayed($f) && $f->{status} == $o{stored},
           "$name: a retry replays the stored answer")
            or diag('final: ' . ($f ? desc($f) : 'none'));
        is(backend_count($key), 1, "$name: executed once");
    } else {
        ok(wait_row_gone($key), "$name: the key is released");
        my $r = post($P, $uri, $key, timeout => 60);
        isnt($r->{status} // 0, 409, "$name: a retry is not refused");
    }

    no_crash($name);
    return join(' ', map { "$_ x$by{$_}" } sort keys %by);
}

scenario(sub {
    my %f;
    $f{refused} = upstream_case('upstream refuses', '/refused',
        ok => sub { ($_[0]{status} // 0) == 502 });
    $f{timeout} = upstream_case('upstream times out', '/slowup?delay=2500',
        executes => 1, unknown => 1,
        ok => sub { ($_[0]{status} // 0) == 504 });
    $f{reset} = upstream_case('upstream resets mid-body',
        '/orders?reset=1&delay=300',
        executes => 1, unknown => 1,
        ok => sub { ($_[0]{status} // 0) == 201
                    && ($_[0]{error} // '') =~ /truncated|reset/ });
    $f{'5xx'} = upstream_case('upstream 500', '/orders?status=500&delay=300',
        executes => 1, ok => sub { ($_[0]{status} // 0) == 500 });
    $f{'5xx kept'} = upstream_case('upstream 500, store_5xx on',
        '/keep5xx?status=500&delay=300', executes => 1, stored => 500,
        ok => sub { ($_[0]{status} // 0) == 500 });
    figure('upstream faults (10 identical requests each)',
           join('; ', map { "$_: $f{$_}" } sort keys %f));
});

scenario(sub {
    # A duplicate's claim (INSERT .. ON DUPLICATE KEY UPDATE; SELECT) can
    # run while the owner releases the key (DELETE after its upstream
    # failed): the SELECT then finds no row.  The store is fine and the key
    # is free, so the duplicate must not get 503 store-unavailable.
    my $name = 'a claim racing a release';
    my ($n, @bad) = (0);
    for my $burst (1 .. 60) {
        my $key = fresh('rel');
        my @res = http_many([ map { { port => $_ % 2 ? $P : $P2,
            method => 'POST', uri => '/refused', key => $key,
            body => 'x' } } 1 .. 20 ], timeout => 60);
        $n += @res;
        push @bad, map { "$key: " . desc($_) }
                   grep { ($_->{status} // 0) != 502
                          && ($_->{status} // 0) != 409 } @res;
        last if @bad;
    }
    ok(!@bad, "$name: only 502 (forwarded) or 409, never 503 ($n requests)")
        or diag(join("\n", @bad) . "\n" . join("\n", grep {
            /the claim returned no row/ } split /\n/, $ngx->error_log
            . $ngx2->error_log));
    no_crash($name);
});

# ------------------------------------------------------ 5. clients leave

scenario(sub {
    my $name = 'client closes while its claim waits on the store';
    my $key = fresh('gone');

    $db->freeze;
    my $r = http_one(port => $P, method => 'POST', uri => '/patient?delay=50',
                     key => $key, body => 'x', close_after => 0.5);
    $db->thaw;

    # the claim still lands; the orphaned claim must be given back
    ok(wait_row_gone($key, 25), "$name: the claim is released");
    is(backend_count($key), 0, "$name: nothing went upstream");

    my $again = post($P, '/patient?delay=50', $key, timeout => 60);
    is(desc($again), '201 new', "$name: a retry executes");
    is(backend_count($key), 1, "$name: once");
    no_crash($name);
});

# opens a connection, sends a request, waits until the backend runs it and
# closes the connection without reading the answer
sub leave_during_upstream {
    my ($uri, $key) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$P")
        or die "connect: $!";
    print {$s} IdemStress::request_for({ method => 'POST', uri => $uri,
                                          key => $key, body => 'x' });
    wait_for("$key upstream", 30, sub { backend_count($key) == 1 });
    close $s;
}

scenario(sub {
    my $name = 'client closes while the upstream works';
    my $key = fresh('abort');
    my $uri = '/short?delay=1500';

    leave_during_upstream($uri, $key);

    # the exchange runs to its end all the same (the module turns
    # proxy_ignore_client_abort on): the response is stored, and every
    # retry, on either instance, replays it
    my @res = http_many([ map { { port => $_ % 2 ? $P : $P2,
        method => 'POST', uri => $uri, key => $key, body => 'x' } } 1 .. 10 ],
        timeout => 60);
    my $fwd = grep { idem($_) =~ /^(new|takeover)$/ } @res;
    is($fwd, 0, "$name: no retry executes again");

    my ($final) = settle({ $key => 'x' }, uri => $uri);
    ok($final->{$key} && replayed($final->{$key}),
       "$name: its response is replayed");
    like($final->{$key} ? $final->{$key}{body} : '', qr/"execution":1/,
         "$name: the replay is the first (and only) execution's answer");
    is(backend_count($key), 1, "$name: executed once");
    no_crash($name);

    $name = 'client closes, proxy_ignore_client_abort on';
    $key = fresh('abort-ign');
    leave_during_upstream('/ignore?delay=1500', $key);

    my ($fin) = settle({ $key => 'x' }, uri => '/ignore?delay=1500');
    my $f = $fin->{$key};
    ok($f && replayed($f), "$name: the response was stored; a retry "
       . "replays it") or diag('final: ' . ($f ? desc($f) : 'none'));
    is(backend_count($key), 1, "$name: executed once");
    no_crash($name);
});

# ------------------------------------------------ 6. a worker SIGKILLed

scenario(sub {
    my $name = 'worker SIGKILLed while it owns keys';
    my $uri = '/short?delay=3000';
    my $pfx = fresh('wkill');
    my $lg = IdemStress::load_start(ports => [$P], uri => $uri,
        prefix => $pfx, keys => 8, dups => 1, waves => 1);

    # the load generator names its keys "<prefix>-w1-k<i>"
    my @k = map { "$pfx-w1-k$_" } 1 .. 8;
    wait_for('eight requests upstream', 30,
             sub { !grep { backend_count($_) != 1 } @k }, 0.1);

    my $conn = IdemStress::pids_connected_to($BACKEND_PORT, $ngx->workers);
    my ($victim) = sort { $conn->{$b} <=> $conn->{$a} } keys %$conn;
    ok($victim, "$name: found the worker that holds requests");
    $victim //= ($ngx->workers)[0];
    $killed{$victim} = 1;
    kill 'KILL', $victim;

    my $rows = IdemStress::load_stop($lg);
    my %lost = map { $_->{key} => $_->{body} }
               grep { $_->{error} || !$_->{status} } @$rows;
    my %done = map { $_->{key} => $_ } grep { !$_->{error} } @$rows;
    cmp_ok(scalar keys %lost, '>=', 1, "$name: some keys lost their owner");

    # right after: a duplicate of a lost key is refused while the lease
    # lives (on a very slow run the lease may already have ended: then it
    # is the one takeover)
    my (@early, %fwd);
    for my $key (sort keys %lost) {
        my $r = post($P, $uri, $key, body => $lost{$key}, timeout => 30);
        if (idem($r) eq 'takeover') {
            $fwd{$key}++;
        } elsif (($r->{status} // 0) != 409) {
            push @early, "$key: " . desc($r);
        }
    }
    ok(!@early, "$name: a duplicate right after the kill gets 409")
        or diag(join "\n", @early);

    # after the lease: a burst of duplicates on both nginx, exactly one
    # of them takes over
    wait_lease_over($_, 30) for keys %lost;
    my @burst;
    for my $key (sort keys %lost) {
        push @burst, map { { port => $_ % 2 ? $P : $P2, method => 'POST',
                             uri => $uri, key => $key,
                             body => $lost{$key} } } 1 .. 10;
    }
    my @res = http_many(\@burst, timeout => 60);
    my @odd;
    for my $i (0 .. $#res) {
        my $r = $res[$i];
        if (idem($r) =~ /^(new|takeover)$/) {
            $fwd{$burst[$i]{key}}++;
        } elsif (!(($r->{status} // 0) == 409 || replayed($r))) {
            push @odd, "$burst[$i]{key}: " . desc($r);
        }
    }
    my @badtake = grep { ($fwd{$_} // 0) != 1 } sort keys %lost;
    ok(!@badtake && !@odd, "$name: after the lease exactly one duplicate "
       . "takes over, the others get 409")
        or diag(join "\n", @odd,
                map { "$_: forwarded " . ($fwd{$_} // 0) . " times" } @badtake);

    my ($final, $stuck) = settle(\%lost, uri => $uri, timeout => 60);
    my @bad;
    for my $key (sort keys %lost) {
        my $c = backend_count($key);
        push @bad, "$key: executed $c times (1 lost + 1 takeover expected)"
            if $c != 2;
        push @bad, "$key: no replay at the end"
            unless $final->{$key} && replayed($final->{$key});
    }
    ($final) = settle({ map { $_ => $done{$_}{body} } keys %done },
                      uri => $uri);
    for my $key (sort keys %done) {
        push @bad, "$key: survivor executed " . backend_count($key) . " times"
            if backend_count($key) != 1;
        push @bad, "$key: survivor not replayed"
            unless $final->{$key} && replayed($final->{$key});
    }
    ok(!@bad, "$name: lost keys ran once more after the lease, the others "
              . "once") or diag(join "\n", @bad);

    my @sig = grep { /exited on signal/ } split /\n/, $ngx->error_log;
    ok(@sig == 1 && $sig[0] =~ /process $victim exited on signal 9/,
       "$name: only the killed worker exited on a signal")
        or diag(join "\n", @sig);
    wait_for('a new worker', 30, sub { $ngx->workers == 2 });
    recovered($name);
    no_crash($name);
    figure($name, sprintf("%d of 8 in-flight keys lost with worker %d, "
                          . "each taken over once after the 6s lease",
                          scalar keys %lost, $victim));
});

# ------------------------------------------- 7. reload and binary upgrade

sub under_load {
    my ($name, $action) = @_;

    my $lg = IdemStress::load_start(ports => [$P], uri => '/orders?delay=100',
        prefix => fresh('reload'), keys => 3, dups => 4);
    IdemStress::load_more($lg, 24);

    my $what = $action->();

    IdemStress::load_more($lg, 24);
    my $rows = IdemStress::load_stop($lg);
    my $st = check_run($name, $rows, uri => '/orders?delay=100');
    no_crash($name);
    recovered($name);
    figure($name, "$what; " . stats_text($st));
}

scenario(sub { under_load('nginx -s reload under load', sub {
    my @old = $ngx->workers;
    my $m = $ngx->master;
    for (1 .. 2) {
        $ngx->signal('HUP');
        my %o = map { $_ => 1 } @old;
        wait_for('the old workers to exit', 90, sub {
            $ngx->check_master($m);
            my @w = $ngx->workers;
            @w == 2 && !grep { $o{$_} } @w;
        }, 0.1);
        @old = $ngx->workers;
    }
    return 'two reloads';
}) });

# the counters of store "f" that only ever grow: requests of every
# status, and claims
sub f_counters {
    my $r = http_one(port => $P, method => 'GET', uri => '/metrics');
    return undef if $r->{error} || ($r->{status} // 0) != 200;
    my ($req, $claims) = (0, 0);
    for (split /\n/, $r->{body}) {
        $req += $1 if /^nginx_idempotency_requests_total\{store="f",[^}]*\} (\d+)$/;
        $claims += $1 if /^nginx_idempotency_store_operations_total\{store="f",operation="claim",[^}]*\} (\d+)$/;
    }
    return [$req, $claims];
}

scenario(sub { under_load('nginx -s reload every second under load', sub {
    my $m = $ngx->master;
    my @seen = (f_counters());
    for (1 .. 8) {
        $ngx->signal('HUP');
        sleep 1;
        $ngx->check_master($m);
        push @seen, f_counters();
    }
    wait_for('the old workers to exit', 90, sub {
        !grep { IdemStress::read_file("/proc/$_/cmdline") =~ /shutting/ }
              $ngx->workers;
    }, 0.2);
    push @seen, f_counters();
    my @bad = grep { !defined $seen[$_] || !defined $seen[$_ - 1]
                     || $seen[$_][0] < $seen[$_ - 1][0]
                     || $seen[$_][1] < $seen[$_ - 1][1] } 1 .. $#seen;
    ok(!@bad && $seen[-1][0] > $seen[0][0],
       'reload every second: the metrics never went back')
        or diag(join ', ', map { defined $_ ? "@$_" : 'no answer' } @seen);
    return sprintf('8 reloads a second apart; requests counted %d -> %d, '
                   . 'claims %d -> %d, never decreasing', $seen[0][0],
                   $seen[-1][0], $seen[0][1], $seen[-1][1]);
}) });

scenario(sub { under_load('binary upgrade (USR2 + WINCH + QUIT) under load',
                          sub {
    my $old = $ngx->master;
    my $scrapes = 0;
    my $missed = 0;
    my $scrape = sub { $scrapes++; $missed++ unless f_counters() };
    $ngx->signal('USR2');
    wait_for('the new master', 30, sub {
        $ngx->check_master($old);
        $scrape->();
        my $m = $ngx->master;
        $m && $m != $old && $ngx->workers == 2;
    }, 0.1);

    # the old workers stop taking connections and finish what they have
    # (their completions included); then the old master goes
    kill 'WINCH', $old;
    wait_for('the old workers to exit', 90, sub {
        $scrape->();
        !grep { IdemStress::read_file("/proc/$_/cmdline") =~ /worker/ }
              IdemStress::children_of($old);
    }, 0.1);
    kill 'QUIT', $old;
    wait_for('the old master to exit', 90, sub {
        $scrape->();
        !IdemStress::proc_alive($old);
    }, 0.1);
    is($missed, 0, "binary upgrade: /metrics answered all $scrapes scrapes");
    return "master $old replaced by " . $ngx->master
           . ", /metrics answered $scrapes scrapes during the upgrade";
}) });

# --------------------------------------- 8. outage shorter than the lease

scenario(sub {
    # The store is down for about half the lease while a response waits
    # to be stored, and is back well before the lease ends.  The owner's
    # response must then land before the lease ends: a duplicate after the
    # lease must not run the operation a second time.
    my $name = 'store outage of half the lease during completion';
    my $key = fresh('outage');
    my $uri = '/outage?delay=1000';
    my $lg = IdemStress::load_start(ports => [$P], uri => $uri,
        prefix => $key, keys => 1, dups => 1, waves => 1);
    my $k = "$key-w1-k1";

    wait_for("$k upstream", 30, sub { backend_count($k) == 1 });
    my $t0 = time;
    $db->stop;

    # down until the completion has failed seven times (about 16 s)
    wait_for('seven failed completion tries', 90, sub {
        my @l = grep { /storing the response of key \Q${\ IdemStress::key_id($k)}\E failed/ }
                split /\n/, $ngx->error_log;
        @l >= 7;
    }, 0.1);
    $db->start;
    my $down = time - $t0;
    my ($state, $left) = row($k);
    my $rows = IdemStress::load_stop($lg);
    is($rows->[0]{status}, 201, "$name: the client got its response");

    wait_lease_over($k, 60);
    my $r = post($P2, $uri, $k, body => $rows->[0]{body}, timeout => 60);
    ok(($r->{status} // 0) == 409 || replayed($r),
       "$name: a duplicate after the lease is not executed again")
        or diag(sprintf("duplicate: %s; the store was down %.1fs of the "
                        . "30s lease and back %.1fs before it ended",
                        desc($r), $down, ($left // 0) / 1000));
    is(backend_count($k), 1, "$name: executed once");
    no_crash($name);
    figure($name, sprintf("store down %.1fs, back %.1fs before the end of "
                          . "the 30s lease", $down, ($left // 0) / 1000));
});

figure('total', sprintf("%.0fs", time - $t_start));

done_testing();
