#!/usr/bin/env python3
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""The module's files as layers: who calls whom, and who includes whom.

    scripts/layers.py [MODULE_DIR] [FILE.c ...]

A file calls another when it names a function that only the other
defines (nginx style: the name at column 0, then '('), as
../shared/tools/circles.py counts it; a call through a stored handler is
not a call.  Prints, for each FILE.c given (all, by default), the files
it calls; then the number of layers (the longest chain of calls, a file
that calls none being layer 1) and the include loops among the headers
(a header that includes, through others, a header that includes it).
"""

import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 and os.path.isdir(sys.argv[1]) \
    else "ngx_http_idempotency_module"
only = [a for a in sys.argv[1:] if a.endswith(".c")]


def strip(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


files = sorted(f for f in os.listdir(root) if f.endswith(".c"))
src, defs = {}, {}
for f in files:
    src[f] = strip(open(os.path.join(root, f), errors="replace").read())
    lines = src[f].split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"^([a-z_][a-z0-9_]*)\(", line)
        if m and i > 0 and "static" not in lines[i - 1]:
            defs.setdefault(m.group(1), f)

calls = {f: set() for f in files}
for f, text in src.items():
    for name in set(re.findall(r"\b([a-z_][a-z0-9_]*)\s*\(", text)):
        g = defs.get(name)
        if g and g != f:
            calls[f].add(g)


def short(f):
    return f.replace("ngx_http_idempotency_", "")


for f in only or files:
    print("%s calls %d: %s" % (short(f), len(calls[f]),
                               " ".join(sorted(short(g) for g in calls[f]))))

depth = {}


def layer(f, seen=()):
    if f in seen:
        return 0            # a circle: circles.py names it
    if f not in depth:
        depth[f] = 1 + max([layer(g, seen + (f,)) for g in calls[f]] + [0])
    return depth[f]


print("layers: %d" % max(layer(f) for f in files))

# includes of the module's own headers, from each header
headers = sorted(h for h in os.listdir(root) if h.endswith(".h"))
inc = {}
for h in headers:
    text = open(os.path.join(root, h), errors="replace").read()
    inc[h] = set(re.findall(r'#include\s+"([^"]+\.h)"', text)) & set(headers)

loops = set()


def reach(h, path):
    for g in inc.get(h, ()):
        if g == path[0]:
            loops.add(tuple(sorted(path)))
        elif g not in path and len(path) < 12:
            reach(g, path + [g])


for h in headers:
    reach(h, [h])
print("include loops: %d" % len(loops))
for loop in sorted(loops):
    print("  " + " ".join(short(h) for h in loop))

# nginx's ngx_config.h must come before any system header (it defines
# _GNU_SOURCE, which later nginx versions' event headers need): the
# first system header each file reaches, following its own headers
first = {}


def first_system(f, seen=()):
    text = open(os.path.join(root, f), errors="replace").read()
    for m in re.finditer(r'#include\s+([<"])([^>"]+)[>"]', strip_c(text)):
        name = m.group(2)
        if m.group(1) == '"' and name in headers:
            if name not in seen:
                got = first_system(name, seen + (f,))
                if got:
                    return got
        else:
            return name
    return None


def strip_c(text):
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


late = [f for f in files if first_system(f) != "ngx_config.h"]
print("files reaching a system header before ngx_config.h: %d" % len(late))
for f in late:
    print("  %s: <%s>" % (short(f), first_system(f)))
sys.exit(1 if loops or late else 0)
