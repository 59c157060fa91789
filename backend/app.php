<?php
// Copyright (C) 2026 The ngx_http_idempotency_module authors
// SPDX-License-Identifier: BSD-2-Clause
//
// The PHP-FPM test app (t/085-php-fpm.t, PHP's standard library only),
// run by the suite's own PHP-FPM (scripts/services.sh php-fpm) behind
// nginx's fastcgi_pass.
//
// Every request but GET /__count is one execution, counted per
// Idempotency-Key (the header as received, "-" when absent) in a file of
// IDEM_COUNT_DIR under flock(), so that the count is right across
// PHP-FPM's worker processes.
//
//   GET /__count?key=K   text/plain, the executions of K (without key=:
//                        of every key); not an execution
//
// Query parameters of an execution:
//   status=N     answer with status N (201 for POST, 200 otherwise)
//   delay=MS     sleep MS ms first
//   size=N       body of N bytes, byte i = i % 251, octet-stream
//   binary=1     body = bytes 0..255, 255..0, 64 NULs, octet-stream
//   cookies=N    N headers "Set-Cookie: c<i>=v<i>; Path=/"
//   length=1     a Content-Length header (PHP sends none by itself)
//   slow_body=MS the headers and half the body, sleep MS, the rest
//   kill=1       the headers and half the body, then the worker kills
//                itself (SIGKILL): the answer never ends
// Default body: {"order_id":"ord-<n>","key":K,"execution":<c>,
// "method":M,"uri":U,"body_bytes":<len>}\n, n the count of every key.

function count_file($key)
{
    return getenv('IDEM_COUNT_DIR') . '/k-' . hash('sha256', $key);
}

// one more execution of $key (and of all keys): [n of all, n of $key]
function execute_once($key)
{
    $out = [];
    foreach ([count_file("\0all"), count_file($key)] as $path) {
        $f = fopen($path, 'c+');
        flock($f, LOCK_EX);
        $n = (int) stream_get_contents($f) + 1;
        ftruncate($f, 0);
        rewind($f);
        fwrite($f, (string) $n);
        fflush($f);
        flock($f, LOCK_UN);
        fclose($f);
        $out[] = $n;
    }
    return $out;
}

function read_count($key)
{
    $f = @fopen(count_file($key), 'r');
    if ($f === false) {
        return 0;
    }
    flock($f, LOCK_SH);
    $n = (int) stream_get_contents($f);
    fclose($f);
    return $n;
}

function pattern_body($n)
{
    $unit = '';
    for ($i = 0; $i < 251; $i++) {
        $unit .= chr($i);
    }
    return substr(str_repeat($unit, intdiv($n, 251) + 1), 0, $n);
}

function binary_body()
{
    $b = '';
    for ($i = 0; $i < 256; $i++) {
        $b .= chr($i);
    }
    return $b . strrev($b) . str_repeat("\0", 64);
}

$method = $_SERVER['REQUEST_METHOD'];
$uri = $_SERVER['REQUEST_URI'];
$path = parse_url($uri, PHP_URL_PATH);
$p = $_GET;

// under any prefix (docs/cookbook.md's /php/ location: t/540)
if (substr($path, -8) === '/__count' && $method === 'GET') {
    header('Content-Type: text/plain');
    echo isset($p['key']) ? read_count($p['key']) : read_count("\0all");
    exit;
}

$key = $_SERVER['HTTP_IDEMPOTENCY_KEY'] ?? '-';
$reqbody = file_get_contents('php://input');
[$total, $execution] = execute_once($key);

if (isset($p['delay'])) {
    usleep((int) $p['delay'] * 1000);
}

$status = isset($p['status']) ? (int) $p['status']
                               : ($method === 'POST' ? 201 : 200);
$order = "ord-$total";

if (isset($p['size'])) {
    $body = pattern_body((int) $p['size']);
    $type = 'application/octet-stream';
} elseif (($p['binary'] ?? '') === '1') {
    $body = binary_body();
    $type = 'application/octet-stream';
} else {
    $body = json_encode(['order_id' => $order, 'key' => $key,
                         'execution' => $execution, 'method' => $method,
                         'uri' => $uri, 'body_bytes' => strlen($reqbody)],
                        JSON_UNESCAPED_SLASHES) . "\n";
    $type = 'application/json';
}

header("Content-Type: $type");
header("Location: /orders/$order");
header("X-Execution: $execution");
header("X-Order-Id: $order");
for ($i = 1; $i <= (int) ($p['cookies'] ?? 0); $i++) {
    header("Set-Cookie: c$i=v$i; Path=/", false);
}
if (($p['length'] ?? '') === '1') {
    header('Content-Length: ' . strlen($body));
}
// after Location, which would make a 200 a 302
http_response_code($status);

$half = intdiv(strlen($body), 2);
$slow = (int) ($p['slow_body'] ?? 0);

if ($slow > 0 || ($p['kill'] ?? '') === '1') {
    echo substr($body, 0, $half);
    flush();
    if (($p['kill'] ?? '') === '1') {
        usleep(100000);     // let the first half leave the worker
        posix_kill(getmypid(), 9);
    }
    usleep($slow * 1000);
    echo substr($body, $half);
} else {
    echo $body;
}
