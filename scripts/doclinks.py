#!/usr/bin/env python3
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""Relative links of README.md and docs/*.md: every target file exists,
and every #anchor is a heading of its page, by GitHub's rules (lower
case, spaces to '-', punctuation but '-' and '_' dropped, a repeated
heading gets -1, -2, ...).  Prints the broken ones; exit status 1 if any.

    python3 scripts/doclinks.py [FILE.md ...]
"""

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)\)')


def anchors(path):
    out, seen, fence = set(), {}, False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            fence = not fence
        if fence or not line.startswith('#'):
            continue
        text = line.lstrip('#').strip()
        a = re.sub(r'[^\w\- ]', '', text.lower()).replace(' ', '-')
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else '%s-%d' % (a, n))
    return out


def check(path):
    bad, fence, code = [], False, 0
    for no, line in enumerate(open(path, encoding='utf-8'), 1):
        if line.startswith('```'):
            fence = not fence
        if fence or line.startswith('    '):
            continue
        line = re.sub(r'`[^`]*`', '', line)
        for target in LINK.findall(line):
            if re.match(r'[a-z]+:', target):
                continue
            f, _, a = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(path), f)) \
                if f else path
            if not os.path.exists(dest):
                bad.append('%s:%d: %s: no such file' % (path, no, target))
            elif a and dest.endswith('.md') and a not in anchors(dest):
                bad.append('%s:%d: %s: no such heading' % (path, no, target))
    return bad


def main():
    files = sys.argv[1:] or ([os.path.join(ROOT, 'README.md')] +
                             sorted(glob.glob(os.path.join(ROOT, 'docs',
                                                           '*.md'))))
    bad, n = [], 0
    for f in files:
        bad += check(f)
        n += 1
    for b in bad:
        print(os.path.relpath(b, ROOT) if b.startswith('/') else b)
    print('doclinks: %d files, %d broken links' % (n, len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
