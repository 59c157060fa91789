# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

package IdemStress::Races;

# Bursts of identical requests (same key, same body) against one nginx,
# two nginx sharing one MariaDB, and a location with idempotency_wait.
# Used by t/100-races.t (short) and `make stress` (IDEM_STRESS=long).

use strict;
use warnings;

use Time::HiRes qw(time sleep);
use IdemStress;

# $store_port: a MariaDB port, or a whole idempotency_store line
sub nginx_http {
    my ($port, $store_port) = @_;

    my $store = $store_port =~ /^\d+$/
        ? store_line('main', $store_port, pool => 32, wait_queue => 4096,
                     connect_timeout => '5s', query_timeout => '10s')
        : $store_port;

    return $store . <<"HTTP";
    upstream backend {
        server 127.0.0.1:$BACKEND_PORT;
        keepalive 16;
    }

    server {
        listen 127.0.0.1:$port backlog=4096;

        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location /orders {
            idempotency main;
            idempotency_lease 30s;
            proxy_pass http://backend;
            add_header X-Idem \$idempotency_status always;
            add_header X-Tier \$idempotency_tier always;
        }

        location /wait {
            idempotency main;
            idempotency_lease 30s;
            idempotency_wait 20s;
            proxy_pass http://backend;
            add_header X-Idem \$idempotency_status always;
        }

        location = /metrics { idempotency_metrics; }
    }
HTTP
}

# Runs one scenario: $keys keys, each raced by $conc identical requests,
# $parallel keys at a time, spread round-robin over @$ports.
# Returns a stats hash with problems => [...].
sub run_scenario {
    my (%o) = @_;

    my ($name, $ports, $nkeys, $conc) = @o{qw(name ports keys conc)};
    my $par = $o{parallel} || 2;
    my $path = $o{path} || '/orders';
    my $uri = "$path?delay=" . ($o{delay} // 200);
    (my $tag = "race-$$-" . int(time) . "-$name") =~ s/[^A-Za-z0-9-]+/-/g;

    my %st = (name => $name, keys => $nkeys, requests => 0, answered => 0,
              n409 => 0, nreplay => 0, executions => 0, problems => [],
              instances => scalar @$ports);
    my $p = $st{problems};
    my $t0 = time;

    for (my $first = 1; $first <= $nkeys; $first += $par) {
        my @keys = map { "$tag-$_" }
                   $first .. ($first + $par - 1 > $nkeys
                              ? $nkeys : $first + $par - 1);
        my (@reqs, @owner);

        # the duplicates of every key alternate between the instances
        for my $d (1 .. $conc) {
            for my $key (@keys) {
                push @reqs, { port => $ports->[$d % @$ports],
                              method => 'POST', uri => $uri, key => $key,
                              headers => [['Content-Type',
                                           'application/json']],
                              body => qq({"item":"book","key":"$key"}) };
                push @owner, $key;
            }
        }

        my @res = http_many(\@reqs, timeout => 180);
        $st{requests} += @reqs;
        # an answer: a whole response with a status line, no transport error
        $st{answered} += grep { !$_->{error} && $_->{status} } @res;

        my %seen;
        for my $i (0 .. $#res) {
            $seen{$owner[$i]}{$reqs[$i]{port}}++ unless $res[$i]{error};
        }
        for my $key (@keys) {
            my $n = keys %{ $seen{$key} || {} };
            push @$p, "$key: answered by $n of " . @$ports . " instances"
                if $n != @$ports;
        }

        for my $key (@keys) {
            my @mine = map { $res[$_] } grep { $owner[$_] eq $key } 0 .. $#res;
            my $s = summarize_burst($key, \@mine);

            $st{n409} += $s->{n409};
            $st{nreplay} += $s->{nreplay};
            push @$p, @{ $s->{problems} };

            # the completion lands after the last byte: poll until a
            # retry is a replay, which must equal the executed response

            my $final;
            eval {
                wait_for("a replay of $key", 60, sub {
                    $final = http_one(port => $ports->[0], method => 'POST',
                        uri => $uri, key => $key,
                        headers => [['Content-Type', 'application/json']],
                        body => qq({"item":"book","key":"$key"}));
                    return !$final->{error} && $final->{status} == 201;
                }, 0.1);
            };
            push @$p, "$key: no answer after the burst: $@" if $@;

            if ($final && $s->{original}) {
                my $f = summarize_burst($key, [$final],
                                        original => $s->{original},
                                        originals => 0);
                push @$p, @{ $f->{problems} };
            }

            my $c = backend_count($key);
            $st{executions} += $c;
            push @$p, "$key: executed $c times upstream" if $c != 1;
        }
    }

    $st{duplicates} = $st{requests} - $nkeys;
    $st{seconds} = time - $t0;

    return \%st;
}

sub figures {
    my ($s) = @_;

    return sprintf("%-36s %3d key(s) x %3d: %6d requests, %6d racing "
                   . "duplicates, %4d upstream executions, %6d x 409, "
                   . "%6d replays, %.1fs",
                   "$s->{name} ($s->{instances} nginx)", $s->{keys},
                   $s->{requests} / ($s->{keys} || 1), $s->{requests},
                   $s->{duplicates}, $s->{executions}, $s->{n409},
                   $s->{nreplay}, $s->{seconds});
}

1;
