# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

package WebhookTest;

# Helpers of the webhook tests (t/510, t/520, t/530): deliveries signed by
# the providers' own libraries (t/tools/webhook-sign.js), the backend's
# count of a delivery (backend/webhooks.py), the key hash of a key
# composed from idempotency_key's sources, secret files.

use strict;
use warnings;

use Digest::SHA qw(sha256_hex);
use Exporter 'import';
use File::Path qw(make_path);
use JSON::PP ();

use lib 't/stress';
use IdemStress ();

our @EXPORT = qw(sign hook_count source_hash_hex source_state secret_file
                 have_signers);

# whether scripts/node-deps.sh has installed the signing libraries
sub have_signers {
    my $d = "$IdemStress::BUILD/node/node_modules";
    return -d "$d/stripe" && -d "$d/standardwebhooks"
           && -d "$d/\@octokit/webhooks-methods";
}

# the headers of each delivery, signed: sign({scheme, secret, body, id,
# timestamp, svix}, ...) -> ({header => value}, ...)
sub sign {
    my (@jobs) = @_;

    my $in = "$IdemStress::DIR/sign-$$.json";
    IdemStress::write_file($in, JSON::PP->new->canonical->encode(\@jobs));

    my $out = `node t/tools/webhook-sign.js < '$in'`;
    die "webhook-sign.js failed ($?)\n" if $?;
    unlink $in;

    return @{ JSON::PP::decode_json($out) };
}

# how often the backend ran a provider's delivery
sub hook_count {
    my ($provider, $id) = @_;
    return IdemStress::backend_count("hook:$provider:$id");
}

# the module's lookup hash of a key composed of @$parts under $scope
# (ngx_http_idempotency_key.c, "idempotency-src/1", netstrings)
sub source_hash_hex {
    my ($parts, $scope) = @_;
    $scope //= '';
    my $key = join '', map { length($_) . ":$_," } @$parts;
    return sha256_hex('idempotency-src/1' . pack('N', length $scope)
                      . $scope . $key);
}

# the state of that key's row, or '' when there is none
sub source_state {
    my ($parts, $scope) = @_;
    my $st = IdemStress::sql_at($ENV{TEST_NGINX_MYSQL_PORT},
        "SELECT state FROM idempotency_keys WHERE key_hash = X'"
        . source_hash_hex($parts, $scope) . "'");
    chomp $st;
    return $st;
}

# a file holding $secret, for secret_file=
sub secret_file {
    my ($name, $secret) = @_;
    make_path("$IdemStress::DIR/secrets");
    my $f = "$IdemStress::DIR/secrets/$name";
    IdemStress::write_file($f, "$secret\n");
    return $f;
}

1;
