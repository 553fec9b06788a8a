#!/usr/bin/env python3
"""Every backend feature builds on its own, without a warning: `cargo check` of the
`meshline` facade with each backend alone (no `rpc`, no default features), and of the
backends' crate with each of its features that check does not reach (its TLS ones).
A `cfg(any(feature = ...))` list that misses a feature, or code that only compiles
beside another backend, fails here and not in a user's build (a build with every
feature on hides both). The feature tables themselves are held to the facade's table
of backends by `tests/backend_lists.rs`.
"""
import subprocess
import sys
import tomllib


def features(path):
    """The manifest's features that a user turns on (not `default`, not `_internal`)."""
    with open(path, "rb") as f:
        table = tomllib.load(f).get("features", {})
    return sorted(f for f in table if f != "default" and not f.startswith("_"))


def check(package, feature):
    """Builds `package` with `feature` alone; a warning fails it as an error does (a
    feature left out of a cfg list often shows as an unused item, not an error)."""
    cmd = ["cargo", "check", "--quiet", "-p", package, "--no-default-features", "--features", feature]
    print("  " + " ".join(cmd), flush=True)
    run = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    if run.stderr:
        print(run.stderr, file=sys.stderr, end="")
    warned = any(line.startswith("warning") for line in run.stderr.splitlines())
    return run.returncode == 0 and not warned


def main():
    # The facade's backends: every feature but the aggregates and the non-backends.
    backends = [f for f in features("Cargo.toml")
                if f not in ("rpc", "tower", "tx-http", "all", "all-tls") and not f.endswith("-tls")]
    # The facade's `<backend>` turns on the backends crate's feature of the same name and
    # nothing else of it, and its check shows that crate's warnings (a path dependency):
    # the backends crate is checked alone only for the features that check does not reach
    # (its TLS ones).
    others = [f for f in features("registry-others/Cargo.toml") if f not in backends]
    failed = [f"meshline-registry-others --features {f}"
              for f in others if not check("meshline-registry-others", f)]
    failed += [f"meshline --features {b}" for b in backends if not check("meshline", b)]
    for f in failed:
        print(f"scripts/check-features.py: does not build alone without warnings: {f}",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
