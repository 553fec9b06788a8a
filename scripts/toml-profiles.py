#!/usr/bin/env python3
"""Prints the `[profile.*]` tables of a Cargo.toml (the argument) as TOML, for a
throwaway workspace that must build with the same profiles (scripts/package-check.sh).
Profile settings are scalars (strings, numbers, booleans), which JSON writes as TOML
does; table keys are quoted."""
import json
import sys
import tomllib


def emit(name, table):
    scalars = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
    if scalars:
        print(f"\n[{name}]")
        for key, value in scalars:
            print(f"{json.dumps(key)} = {json.dumps(value)}")
    for key, value in table.items():
        if isinstance(value, dict):
            emit(f"{name}.{json.dumps(key)}", value)


with open(sys.argv[1], "rb") as f:
    for profile, table in tomllib.load(f).get("profile", {}).items():
        emit(f"profile.{json.dumps(profile)}", table)
