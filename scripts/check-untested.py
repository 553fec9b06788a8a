#!/usr/bin/env python3
"""A target that `cargo test` skips holds no test: every workspace target whose manifest
says `test = false` (the example programs, the testkit's doubles, the support
libraries: each would otherwise be compiled and linked once more as an empty test
binary) is searched for `#[test]`, `#[tokio::test]` and `#[cfg(test)]`. A test added to
one would never run, and pass unseen; here it fails, naming the file.

What is searched: a program's file, or its folder when it is a `main.rs` (its modules);
a library's folder (`src/`), except `src/bin/` (the programs, searched as programs).
"""
import json
import re
import subprocess
import sys
from pathlib import Path

TEST = re.compile(r"#\[(test|tokio::test\b[^\]]*|cfg\(test\))\]")


def sources(target):
    src = Path(target["src_path"])
    if "lib" in target["kind"]:
        return [p for p in src.parent.rglob("*.rs") if p.relative_to(src.parent).parts[0] != "bin"]
    if src.name == "main.rs":
        return sorted(src.parent.rglob("*.rs"))
    return [src]


def main():
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        stdout=subprocess.PIPE, text=True, check=True).stdout)
    found, untested = [], 0
    for package in meta["packages"]:
        for target in package["targets"]:
            if target.get("test", True) or not ({"lib", "bin"} & set(target["kind"])):
                continue
            untested += 1
            for path in sources(target):
                for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    if TEST.search(line):
                        found.append(f"{path}:{n}: {line.strip()}  "
                                     f"({package['name']} {target['name']} says test = false)")
    for f in found:
        print(f, file=sys.stderr)
    if found:
        print("scripts/check-untested.py: the tests above are in targets `cargo test` skips; "
              "move them into the library or tests/, or drop `test = false`", file=sys.stderr)
        return 1
    print(f"ok: {untested} targets with test = false hold no test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
