#!/usr/bin/env perl
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# docs/operations.png: what a dashboard of the module's metrics shows
# during `make stress`.  Scrapes /metrics of the two race nginx of
# t/100-races.t every 0.5 s while the long run goes, then turns the
# samples into per-second series (bench/dashboard.gp plots them).
#
#   bench/dashboard.pl scrape OUT.tsv     until killed
#   bench/dashboard.pl series IN.tsv OUT.dat
#
# TEST-ONLY tooling, run by `make dashboard`.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../t/stress";
use IdemStress ();
use Time::HiRes qw(time sleep);

my ($cmd, $in, $out) = @ARGV;
die "usage: $0 scrape OUT.tsv | series IN.tsv OUT.dat\n"
    unless $cmd && $in;

# what each sample keeps: counters (c) and gauges (g)
my @fields = (
    [c => 'new',      qr/^nginx_idempotency_requests_total\{[^}]*status="new"\} (\d+)/],
    [c => 'replay',   qr/^nginx_idempotency_requests_total\{[^}]*status="replay"\} (\d+)/],
    [c => 'conflict', qr/^nginx_idempotency_requests_total\{[^}]*status="conflict"\} (\d+)/],
    [c => 'claims',   qr/^nginx_idempotency_store_operations_total\{[^}]*operation="claim",result="ok"\} (\d+)/],
    [c => 'claim_s',  qr/^nginx_idempotency_store_operation_duration_seconds_sum\{[^}]*operation="claim"\} ([\d.]+)/],
    [g => 'busy',     qr/^nginx_idempotency_mysql_connections\{[^}]*state="busy"\} (\d+)/],
    [g => 'queue',    qr/^nginx_idempotency_mysql_queue\{[^}]*\} (\d+)/],
    [g => 'progress', qr/^nginx_idempotency_keys_in_progress\{[^}]*\} (\d+)/],
    [g => 'held',     qr/^nginx_idempotency_held_requests\{[^}]*\} (\d+)/],
);

if ($cmd eq 'scrape') {
    open my $fh, '>', $in or die "$in: $!";
    $fh->autoflush(1);
    print $fh join("\t", 't', 'instance', map { $_->[1] } @fields), "\n";
    my $t0 = time;
    while (1) {
        for my $i (0, 1) {
            my $r = IdemStress::http_one(port => IdemStress::port(81 + $i),
                                         method => 'GET', uri => '/metrics',
                                         timeout => 2);
            next if $r->{error} || ($r->{status} // 0) != 200;
            my @v;
            for my $f (@fields) {
                my $sum = 0;
                for (split /\n/, $r->{body}) {
                    $sum += $1 if $_ =~ $f->[2];
                }
                push @v, $sum;
            }
            printf $fh "%.3f\t%d\t%s\n", time - $t0, $i, join("\t", @v);
        }
        sleep 0.5;
    }
}

if ($cmd eq 'series') {
    die "usage: $0 series IN.tsv OUT.dat\n" unless $out;
    open my $fh, '<', $in or die "$in: $!";
    my $head = <$fh>;
    my (%last, %bucket);

    # per-second buckets: counter increases summed over the instances,
    # gauges summed over the instances (their last sample in the second)
    while (my $line = <$fh>) {
        chomp $line;
        my ($t, $i, @v) = split /\t/, $line;
        my $s = int $t;
        for my $k (0 .. $#fields) {
            my ($type, $name) = @{ $fields[$k] };
            if ($type eq 'c') {
                # a new nginx (the next scenario) starts from zero
                my $d = defined $last{$i}[$k] && $v[$k] >= $last{$i}[$k]
                        ? $v[$k] - $last{$i}[$k] : 0;
                $bucket{$s}{$name} += $d;
            } else {
                $bucket{$s}{"$name.$i"} = $v[$k];
            }
            $last{$i}[$k] = $v[$k];
        }
    }

    open my $o, '>', $out or die "$out: $!";
    print $o "# second new/s replay/s conflict/s claims/s claim_ms busy"
             . " queue in_progress held\n";
    for my $s (sort { $a <=> $b } keys %bucket) {
        my $b = $bucket{$s};
        my $g = sub { my $n = shift; ($b->{"$n.0"} // 0) + ($b->{"$n.1"} // 0) };
        my $ms = ($b->{claims} // 0) ? 1000 * ($b->{claim_s} // 0) / $b->{claims}
                                     : 0;
        printf $o "%d %d %d %d %d %.2f %d %d %d %d\n", $s,
               map({ $b->{$_} // 0 } qw(new replay conflict claims)), $ms,
               $g->('busy'), $g->('queue'), $g->('progress'), $g->('held');
    }
}
