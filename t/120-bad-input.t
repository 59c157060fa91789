# Bad input corpus: malformed keys, hostile bytes, odd headers, bodies and
# methods.  Each case gets a precise answer: the module's 400 problem+json
# (key-invalid, key-missing), nginx's own 400/413 where nginx refuses the
# request before the module sees it, or a plain pass-through where that is
# the rule.  Keys full of SQL metacharacters are just bytes: they are
# executed once and replayed, and the table is checked afterwards.
#
# The protected locations set idempotency_wait, so a duplicate that
# arrives before the first response is stored waits for it instead of
# getting a 409: the replay checks do not depend on timing.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();

sub enc {
    my ($s) = @_;
    $s =~ s/([^A-Za-z0-9_.~-])/sprintf('%%%02X', ord $1)/ge;
    return $s;
}

# a POST with raw header bytes
sub raw_post {
    my ($uri, $key_line, $body) = @_;
    $body //= 'x';
    return "POST $uri HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
         . "$key_line\r\nContent-Length: " . length($body) . "\r\n\r\n$body";
}

our @SQL_KEYS;      # [header value, parsed key], checked in the table below

block_defaults(config => orders_location(idempotency_wait => '10s') . <<'CONF');
    client_body_timeout 2s;
    add_header X-Idem $idempotency_status always;
    add_header X-Key $idempotency_key always;

    location /small {
        idempotency main;
        idempotency_wait 10s;
        client_max_body_size 1k;
        proxy_pass http://backend;
    }
    location /buffered {
        idempotency main;
        idempotency_wait 10s;
        client_body_buffer_size 8k;
        client_max_body_size 1m;
        proxy_pass http://backend;
    }
    location /put {
        idempotency main;
        idempotency_wait 10s;
        idempotency_methods PUT DELETE;
        proxy_pass http://backend;
    }
    location /required {
        idempotency main;
        idempotency_required on;
        proxy_pass http://backend;
    }
    location = /count { proxy_pass http://backend/__count; }
CONF

run_tests();

# The SQL-metacharacter keys are plain rows: one per key, found by the
# hash of the parsed key, completed, and the table is still whole.

for my $k (@SQL_KEYS) {
    my ($raw, $key) = @$k;
    my $kh = key_hash_hex($key);
    is(sql("SELECT state, status FROM idempotency_keys"
           . " WHERE key_hash = X'$kh'"),
       "1\t201\n", "the key $raw is one completed row, found by its hash");
}

like(sql("SELECT COUNT(*) FROM idempotency_keys"), qr/^\d+$/,
     "the table is intact after the SQL-metacharacter keys");

__DATA__

=== TEST 1: key of 256 bytes, bare: 400 key-invalid
--- more_headers eval
"Idempotency-Key: " . ("k" x 256)
--- request
POST /orders
x
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- response_body_like: ^\{"type":"urn:ngx-idempotency:problem:key-invalid","title":"Idempotency key invalid","status":400,"detail":"[^"]+"\}$
--- error_log
the key is longer than 255 bytes
--- no_error_log
[error]



=== TEST 2: key of 256 bytes, quoted: 400
--- more_headers eval
"Idempotency-Key: \"" . ("q" x 256) . "\""
--- request
POST /orders
x
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- error_log
the key is longer than 255 bytes



=== TEST 3: 312 bytes quoted that unescape to 255: accepted
--- more_headers eval
"Idempotency-Key: \"t120-3" . ("e" x 194) . ('\\"' x 55) . "\""
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: new
--- no_error_log
[error]



=== TEST 4: quoted with escapes that unescape to 256: 400
--- more_headers eval
"Idempotency-Key: \"t120-4" . ("e" x 195) . ('\\\\' x 55) . "\""
--- request
POST /orders
x
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key is longer than 255 bytes



=== TEST 5: empty header value: 400, never upstream
--- config
    add_header X-Idem $idempotency_status always;
    location /orders {
        idempotency main;
        proxy_pass http://backend;
        # what the backend would count it under, were it forwarded
        proxy_set_header Idempotency-Key "t120-5$http_idempotency_key";
    }
--- raw_request eval
main::raw_post('/orders', 'Idempotency-Key:')
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- response_body_like: "type":"urn:ngx-idempotency:problem:key-invalid"
--- error_log
the key is empty



=== TEST 5a: ... the backend never saw it, though it counts the same request sent past the module
--- config
    location /plain {
        proxy_pass http://backend;
        proxy_set_header Idempotency-Key "t120-5$http_idempotency_key";
    }
    location = /count { proxy_pass http://backend/__count; }
--- more_headers eval
["", "Idempotency-Key:", ""]
--- request eval
["GET /count?key=t120-5", "POST /plain\nx", "GET /count?key=t120-5"]
--- error_code eval
[200, 201, 200]
--- response_body_like eval
['^0$', '"key":"t120-5"', '^1$']



=== TEST 6: spaces only: 400 (nginx strips them, the key is empty)
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key:      ")
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key is empty



=== TEST 6b: tabs around spaces: nginx keeps the tabs, a bad key (400)
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: \t   \t")
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key has a byte that is not printable ASCII



=== TEST 7: an empty sf-String: 400
--- more_headers
Idempotency-Key: ""
--- request
POST /orders
x
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- error_log
the key is empty



=== TEST 8: a control byte in a bare key: 400
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: t120-8\x01x")
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- error_log
the key has a byte that is not printable ASCII



=== TEST 9: a control byte in a quoted key: 400
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: \"t120-9\x1fx\"")
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key has a byte that is not printable ASCII



=== TEST 10: a TAB inside a bare key: 400
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: t120\t10")
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key has a byte that is not printable ASCII



=== TEST 11: a TAB inside a quoted key: 400
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: \"t120\t11\"")
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key has a byte that is not printable ASCII



=== TEST 12: DEL in a bare key: 400
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: t120-12\x7f")
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key has a byte that is not printable ASCII



=== TEST 13: DEL in a quoted key: 400
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: \"t120-13\x7f\"")
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key has a byte that is not printable ASCII



=== TEST 14: UTF-8 in a bare key: 400
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: t120-caf\xc3\xa9")
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- error_log
the key has a byte that is not printable ASCII



=== TEST 15: a Latin-1 byte in a quoted key: 400
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: \"t120-caf\xe9\"")
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key has a byte that is not printable ASCII



=== TEST 16: a key of only high bytes: 400
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: \x80\xff\xfe")
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key has a byte that is not printable ASCII



=== TEST 17: a bare key with a space is the key itself (as Stripe clients send it)
--- config eval
IdemTest::orders_location(add_header => 'X-Idem X-Key')
--- more_headers
Idempotency-Key: t120 17
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: new
X-Key: t120 17
--- no_error_log
[error]



=== TEST 18: an unbalanced opening quote: 400
--- more_headers
Idempotency-Key: "t120-18
--- request
POST /orders
x
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- error_log
the quoted key has no closing quote



=== TEST 19: a lone quote: 400
--- more_headers
Idempotency-Key: "
--- request
POST /orders
x
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the quoted key has no closing quote



=== TEST 20: a quote inside a bare key: 400
--- more_headers
Idempotency-Key: t120"20
--- request
POST /orders
x
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key has an unbalanced quote



=== TEST 21: a trailing quote on a bare key: 400
--- more_headers
Idempotency-Key: t120-21"
--- request
POST /orders
x
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the key has an unbalanced quote



=== TEST 22: a backslash in a bare key is a character of the key
--- config eval
IdemTest::orders_location(add_header => 'X-Idem X-Key')
--- more_headers
Idempotency-Key: t120\22
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: new
X-Key: t120\22
--- no_error_log
[error]



=== TEST 23: a bad escape (\n) in a quoted key: 400
--- more_headers
Idempotency-Key: "t120\n23"
--- request
POST /orders
x
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- error_log
the quoted key has an escape other than



=== TEST 24: a backslash at the very end: 400
--- more_headers
Idempotency-Key: "t120-24\
--- request
POST /orders
x
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the quoted key has an escape other than



=== TEST 25: the closing quote escaped away: 400
--- more_headers
Idempotency-Key: "t120-25\"
--- request
POST /orders
x
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the quoted key has no closing quote



=== TEST 26: trailing garbage after a quoted key: 400
--- more_headers
Idempotency-Key: "t120-26"x
--- request
POST /orders
x
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- error_log
the quoted key is followed by other characters



=== TEST 27: two quoted strings: 400
--- more_headers
Idempotency-Key: "t120-27" "again"
--- request
POST /orders
x
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the quoted key is followed by other characters



=== TEST 28: an sf-String with parameters is not a key: 400
--- more_headers
Idempotency-Key: "t120-28";v=1
--- request
POST /orders
x
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the quoted key is followed by other characters



=== TEST 29: the header twice: 400
--- more_headers
Idempotency-Key: t120-29a
Idempotency-Key: t120-29b
--- request
POST /orders
x
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- error_log
the header is repeated



=== TEST 30: the header twice in different case, same value: 400
--- more_headers
Idempotency-Key: t120-30
idempotency-key: t120-30
--- request
POST /orders
x
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the header is repeated



=== TEST 31: three headers, one empty: 400
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: t120-31\r\nIdempotency-Key:\r\nIDEMPOTENCY-KEY: t120-31")
--- error_code: 400
--- response_headers
X-Idem: invalid
--- error_log
the header is repeated



=== TEST 32: the header name in upper case is the same header
--- more_headers
IDEMPOTENCY-KEY: t120-32
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=t120-32"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay\nIdempotent-Replayed: true", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 33: a comma is a visible character: one key, not a list
--- more_headers
Idempotency-Key: t120-33a,t120-33b
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new\nX-Key: t120-33a,t120-33b", "X-Idem: replay"]



=== TEST 34: a NUL byte in the key: nginx refuses the header line (400)
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: t120-34\x00x")
--- error_code: 400
--- response_headers
Content-Type: text/html
X-Idem: bypass
--- response_body_like: 400 Bad Request
--- error_log
client sent invalid header line



=== TEST 35: a bare CR in the key: nginx refuses the header line (400)
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: t120-35\rx")
--- error_code: 400
--- response_headers
Content-Type: text/html
--- error_log
client sent invalid header line



=== TEST 36: a 9000-byte key header: nginx's own 400 (header too large)
--- more_headers eval
"Idempotency-Key: " . ("h" x 9000)
--- request
POST /orders
x
--- error_code: 400
--- response_headers
Content-Type: text/html
X-Idem: bypass
--- response_body_like: Request Header Or Cookie Too Large
--- error_log
client sent too long header line



=== TEST 37: a 5000-byte key fits nginx's buffers: the module's 400
--- more_headers eval
"Idempotency-Key: " . ("m" x 5000)
--- request
POST /orders
x
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid
--- error_log
the key is longer than 255 bytes



=== TEST 38: 80 other headers around the key: found, executed once
--- more_headers eval
CORE::join("\n", (map { "X-Pad-$_: " . ("p" x 60) } 1 .. 40), "Idempotency-Key: t120-38", (map { "X-Tail-$_: t" } 1 .. 40))
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=t120-38"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 39: a space before the colon: nginx refuses the header (400)
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key : t120-39")
--- error_code: 400
--- response_headers
Content-Type: text/html
--- error_log
client sent invalid header line



=== TEST 40: an obsolete folded continuation line: nginx refuses it (400)
--- raw_request eval
main::raw_post('/orders', "Idempotency-Key: t120-40\r\n folded")
--- error_code: 400
--- response_headers
Content-Type: text/html
--- error_log
client sent invalid header line



=== TEST 41: an underscore in the header name: nginx drops the header, the request passes through
--- raw_request eval
main::raw_post('/orders', "Idempotency_Key: t120-41")
--- error_code: 201
--- response_headers
X-Idem: bypass
!Idempotent-Replayed
--- error_log
client sent invalid header line: "Idempotency_Key: t120-41"



=== TEST 42: the same with idempotency_required: 400 key-missing
--- raw_request eval
main::raw_post('/required', "Idempotency_Key: t120-42")
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: missing
--- response_body_like: "type":"urn:ngx-idempotency:problem:key-missing","title":"Idempotency key missing","status":400



=== TEST 43: a lower-case method: nginx's 400
--- raw_request eval
"post /orders HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nIdempotency-Key: t120-43\r\nContent-Length: 0\r\n\r\n"
--- error_code: 400
--- response_headers
Content-Type: text/html
--- error_log
client sent invalid method



=== TEST 44: SQL: a single quote in a bare key is just a byte
--- init
push @main::SQL_KEYS, ["t120-44'", "t120-44'"];
--- more_headers
Idempotency-Key: t120-44'
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=" . main::enc("t120-44'")]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new\nX-Key: t120-44'", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']
--- no_error_log
[error]



=== TEST 45: SQL: a classic injection in a quoted key
--- init
push @main::SQL_KEYS, ['"t120-45\'; DROP TABLE idempotency_keys; --"', "t120-45'; DROP TABLE idempotency_keys; --"];
--- more_headers
Idempotency-Key: "t120-45'; DROP TABLE idempotency_keys; --"
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=" . main::enc(q{"t120-45'; DROP TABLE idempotency_keys; --"})]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new\nX-Key: t120-45'; DROP TABLE idempotency_keys; --", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']
--- no_error_log
[error]



=== TEST 46: SQL: a tautology in a quoted key
--- init
push @main::SQL_KEYS, [q{"t120-46' OR '1'='1"}, q{t120-46' OR '1'='1}];
--- more_headers
Idempotency-Key: "t120-46' OR '1'='1"
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=" . main::enc(q{"t120-46' OR '1'='1"})]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 47: SQL: an escaped backslash at the end of the key
--- init
push @main::SQL_KEYS, [q{"t120-47\\\\"}, q{t120-47\\}];
--- more_headers
Idempotency-Key: "t120-47\\"
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new\nX-Key: t120-47\\", "X-Idem: replay"]



=== TEST 48: SQL: backslash-zero, MySQL's escape for NUL
--- init
push @main::SQL_KEYS, [q{"t120-48\\\\0"}, q{t120-48\\0}];
--- more_headers
Idempotency-Key: "t120-48\\0"
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new\nX-Key: t120-48\\0", "X-Idem: replay"]



=== TEST 49: SQL: LIKE wildcards, comment markers, backticks, a semicolon
--- init
push @main::SQL_KEYS, ['t120-49%_*/**/--#`;', 't120-49%_*/**/--#`;'];
--- more_headers
Idempotency-Key: t120-49%_*/**/--#`;
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=" . main::enc('t120-49%_*/**/--#`;')]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new\nX-Key: t120-49%_*/**/--#`;", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 50: SQL: an escaped double quote inside the key
--- init
push @main::SQL_KEYS, [q{"t120-50\\"x"}, q{t120-50"x}];
--- more_headers
Idempotency-Key: "t120-50\"x"
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new\nX-Key: t120-50\"x", "X-Idem: replay"]



=== TEST 51: a key that is a prefix of another is another key
--- more_headers
Idempotency-Key: t120-44
--- request eval
["POST /orders\nx", "GET /count?key=t120-44"]
--- error_code eval
[201, 200]
--- response_headers eval
["X-Idem: new", ""]
--- response_body_like eval
['"execution":1', '^1$']



=== TEST 52: a body over client_max_body_size (Content-Length): 413 from nginx, the key is not taken
--- more_headers
Idempotency-Key: t120-52
--- request eval
["POST /small\n" . ("b" x 2000), "POST /small\nx", "GET /count?key=t120-52"]
--- error_code eval
[413, 201, 200]
--- response_headers eval
["Content-Type: text/html", "X-Idem: new", ""]
--- response_body_like eval
['413 Request Entity Too Large', '"execution":1', '^1$']



=== TEST 53: a chunked body over client_max_body_size: 413 while the module reads it, the key is not taken
--- more_headers eval
["Idempotency-Key: t120-53\nTransfer-Encoding: chunked", "Idempotency-Key: t120-53", ""]
--- request eval
["POST /small\n7d0\r\n" . ("c" x 2000) . "\r\n0\r\n\r\n", "POST /small\nx", "GET /count?key=t120-53"]
--- error_code eval
[413, 201, 200]
--- response_headers eval
["Content-Type: text/html", "X-Idem: new", ""]
--- response_body_like eval
['413 Request Entity Too Large', '"execution":1', '^1$']



=== TEST 54: an empty body is a body: replayed, and a non-empty one is another request (422)
--- more_headers
Idempotency-Key: t120-54
Content-Length: 0
--- request eval
["POST /orders", "POST /orders"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay"]
--- response_body_like eval
['"body_bytes":0', '"body_bytes":0']



=== TEST 55: the same key with a body after the empty one: 422
--- more_headers
Idempotency-Key: t120-54
--- request
POST /orders
x
--- error_code: 422
--- response_headers
Content-Type: application/problem+json
X-Idem: mismatch



=== TEST 56: a binary body (all 256 byte values): executed once, replayed; one byte changed: 422
--- more_headers
Idempotency-Key: t120-56
Content-Type: application/octet-stream
--- request eval
my $bin = "A" . CORE::join('', map { chr } 0 .. 255) . "Z";
(my $other = $bin) =~ s/\x80/\x81/;
["POST /orders\n$bin", "POST /orders\n$bin", "POST /orders\n$other", "GET /count?key=t120-56"]
--- error_code eval
[201, 201, 422, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: mismatch", ""]
--- response_body_like eval
['"body_bytes":258', '"body_bytes":258', 'key-reused', '^1$']



=== TEST 57: a chunked body and the same bytes with Content-Length are one request
--- more_headers eval
["Idempotency-Key: t120-57\nTransfer-Encoding: chunked", "Idempotency-Key: t120-57", "Idempotency-Key: t120-57", ""]
--- request eval
["POST /orders\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "POST /orders\nhello world", "POST /orders\nhello", "GET /count?key=t120-57"]
--- error_code eval
[201, 201, 422, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "X-Idem: mismatch", ""]
--- response_body_like eval
['"body_bytes":11', '"body_bytes":11', 'key-reused', '^1$']



=== TEST 58: a malformed chunked body: nginx's 400, the key is not taken
--- more_headers eval
["Idempotency-Key: t120-58\nTransfer-Encoding: chunked", ""]
--- request eval
["POST /orders\nzz\r\nabc\r\n0\r\n\r\n", "GET /count?key=t120-58"]
--- error_code eval
[400, 200]
--- response_body_like eval
['400 Bad Request', '^0$']



=== TEST 59: Content-Length and Transfer-Encoding together: nginx's 400
--- raw_request eval
"POST /orders HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nIdempotency-Key: t120-59\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
--- error_code: 400
--- response_headers
Content-Type: text/html
--- error_log
client sent "Content-Length" and "Transfer-Encoding" headers at the same time



=== TEST 60: a slow body (sent one second after the headers): executed
--- more_headers
Idempotency-Key: t120-60
--- request eval
[["POST /orders\nhello", {value => " world", delay_before => 1}]]
--- error_code: 201
--- response_headers
X-Idem: new
--- response_body_like: "body_bytes":11
--- timeout: 10



=== TEST 61: the slow body's duplicate, sent at once, is replayed
--- more_headers
Idempotency-Key: t120-60
--- request eval
"POST /orders\nhello world"
--- error_code: 201
--- response_headers
X-Idem: replay
Idempotent-Replayed: true



=== TEST 62: a body that stops short of its Content-Length: nginx gives up after client_body_timeout (408, no answer), the key is not taken
--- raw_request eval
"POST /orders HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nIdempotency-Key: t120-62\r\nContent-Length: 10\r\n\r\nabc"
--- ignore_response
--- timeout: 10
--- error_log
http finalize request: 408



=== TEST 63: ... the full body then executes it once
--- more_headers
Idempotency-Key: t120-62
--- request eval
["POST /orders\nabcdefghij", "GET /count?key=t120-62"]
--- error_code eval
[201, 200]
--- response_headers eval
["X-Idem: new", ""]
--- response_body_like eval
['"body_bytes":10', '^1$']



=== TEST 64: a 64 KiB body spills to a temp file: fingerprinted, forwarded whole, replayed
--- more_headers
Idempotency-Key: t120-64
--- request eval
my $b = CORE::join '', map { chr(65 + $_ % 26) } 0 .. 65535;
["POST /buffered\n$b", "POST /buffered\n$b", "GET /count?key=t120-64"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['"body_bytes":65536', '"body_bytes":65536', '^1$']



=== TEST 65: PUT with the default methods: bypass, executed every time
--- more_headers
Idempotency-Key: t120-65
--- request eval
["PUT /orders\nx", "PUT /orders\nx", "GET /count?key=t120-65"]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["X-Idem: bypass", "X-Idem: bypass\n!Idempotent-Replayed", ""]
--- response_body_like eval
['"execution":1', '"execution":2', '^2$']



=== TEST 66: DELETE with the default methods: bypass
--- more_headers
Idempotency-Key: t120-66
--- request eval
["DELETE /orders", "DELETE /orders", "GET /count?key=t120-66"]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["X-Idem: bypass", "X-Idem: bypass", ""]
--- response_body_like eval
['"execution":1', '"execution":2', '^2$']



=== TEST 67: GET with a key: bypass, even with a malformed key
--- more_headers
Idempotency-Key: "not closed
--- request
GET /orders
--- error_code: 200
--- response_headers
X-Idem: bypass



=== TEST 68: an unknown method: bypass, passed to the upstream as is
--- raw_request eval
"FROB /orders HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nIdempotency-Key: t120-68\r\nContent-Length: 1\r\n\r\nx"
--- error_code: 200
--- response_headers
X-Idem: bypass
--- response_body_like: "method":"FROB"



=== TEST 69: idempotency_methods PUT DELETE: PUT is protected
--- more_headers
Idempotency-Key: t120-69
--- request eval
["PUT /put\n{\"v\":1}", "PUT /put\n{\"v\":1}", "GET /count?key=t120-69"]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay\nIdempotent-Replayed: true", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 70: idempotency_methods PUT DELETE: DELETE without a body is protected
--- more_headers
Idempotency-Key: t120-70
--- request eval
["DELETE /put", "DELETE /put", "GET /count?key=t120-70"]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 71: idempotency_methods PUT DELETE: POST is not protected there
--- more_headers
Idempotency-Key: t120-71
--- request eval
["POST /put\nx", "POST /put\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: bypass", "X-Idem: bypass"]
--- response_body_like eval
['"execution":1', '"execution":2']



=== TEST 72: idempotency_methods PUT DELETE: an invalid key on PUT is a 400
--- more_headers
Idempotency-Key: "t120-72
--- request
PUT /put
x
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: invalid



=== TEST 73: required, and the key missing: 400 key-missing
--- request
POST /required
x
--- error_code: 400
--- response_headers
Content-Type: application/problem+json
X-Idem: missing
--- response_body_like: "type":"urn:ngx-idempotency:problem:key-missing"



=== TEST 74: required, a method not listed, no key: passes through
--- request
PUT /required
x
--- error_code: 200
--- response_headers
X-Idem: bypass



=== TEST 75: HTTP/1.0 request: protected like any other
--- raw_request eval
"POST /orders HTTP/1.0\r\nIdempotency-Key: t120-75\r\nContent-Length: 1\r\n\r\nx"
--- error_code: 201
--- response_headers
X-Idem: new
