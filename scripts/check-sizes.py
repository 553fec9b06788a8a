#!/usr/bin/env python3
"""Fails when a source file (test files aside) is over 600 lines or a function over
150: past those sizes a unit holds more than one concept and a newcomer cannot find
their room in it. Test files (`tests/`, `tests.rs`, `*_tests.rs`) and `#[cfg(test)]`
modules inside a file are not counted. A function is measured from its `fn` line to
the closing brace at its own indentation (rustfmt's layout)."""
import re
import subprocess
import sys

MAX_FILE = 600
MAX_FN = 150

FN = re.compile(
    r'^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)'
)


def is_test_file(path):
    return ("/tests/" in path or path.startswith("tests/") or path.endswith("/tests.rs")
            or path.endswith("_tests.rs"))


def block_end(lines, start, indent):
    """The line of the brace that closes the block opened at or after `start`."""
    k = start
    while k < len(lines) and not lines[k].rstrip().endswith("{"):
        if lines[k].rstrip().endswith(";"):
            return None  # a declaration without a body
        k += 1
    e = k + 1
    while e < len(lines) and lines[e].rstrip() != indent + "}":
        e += 1
    return e


def check(path, problems):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > MAX_FILE:
        problems.append(f"{path}: {len(lines)} lines (at most {MAX_FILE})")
    i = 0
    while i < len(lines):
        if re.match(r"^\s*#\[cfg\(test\)\]", lines[i]) and i + 1 < len(lines):
            indent = re.match(r"^(\s*)", lines[i + 1]).group(1)
            end = block_end(lines, i + 1, indent)
            if end is not None:
                i = end + 1
                continue
        m = FN.match(lines[i])
        if m:
            end = block_end(lines, i, m.group(1))
            if end is not None and end - i + 1 > MAX_FN:
                problems.append(
                    f"{path}:{i + 1}: fn {m.group(8)} is {end - i + 1} lines (at most {MAX_FN})")
        i += 1


def main():
    files = subprocess.check_output(["git", "ls-files", "*.rs"], text=True).split()
    problems = []
    for path in files:
        if not is_test_file(path):
            check(path, problems)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print("scripts/check-sizes.py: split these by the concepts they hold", file=sys.stderr)
        return 1
    print(f"every source file within {MAX_FILE} lines, every function within {MAX_FN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
