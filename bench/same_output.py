#!/usr/bin/env python3
"""Byte-identical check of two builds' outputs (a refactor must not change what is shown).

Runs both builds' `examples/seg_calls` on every protocol fixture (.seg) at snaplens none, 64
and 512, and both `ebtop -r FILE --json` on every recording (plain, `--proto redis,dns`,
`--snaplen 128`), drops only the fields that measure the run rather than the traffic (start,
period/duration, approximate bytes, rates, the summary's ts) and compares.

  bench/same_output.py BASE_TARGET_DIR NEW_TARGET_DIR     (e.g. /tmp/wt/target/debug target/debug)

Exit status 1 when any comparison differs (each named on stdout).
"""
import glob
import json
import os
import subprocess
import sys

# Figures are of every call captured: no CPU budget unless a mode asks for one (--max-cpu).
os.environ.setdefault("EBTOP_MAX_CPU", "off")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_FIELDS = ("start", "period_ns", "duration_ns", "approx_bytes")


def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()
                if not (k in RUN_FIELDS or k.endswith("_per_s") or k.endswith("_rate")
                        or (k == "ts" and v.get("type") == "summary"))}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v


def normalised(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = []
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        try:
            out.append(json.dumps(clean(json.loads(line)), sort_keys=True))
        except ValueError:
            out.append(line.rstrip())
    return p.returncode, out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    base, new = sys.argv[1:]
    cases = []
    for f in sorted(glob.glob(f"{ROOT}/src/protocols/*/fixtures/*.seg")):
        for snap in ([], ["64"], ["512"]):
            cases.append((["examples/seg_calls", f, *snap]))
    recs = sorted(glob.glob(f"{ROOT}/tests/fixtures/recordings/*.ebt")
                  + glob.glob(f"{ROOT}/src/protocols/*/fixtures/*.ebt"))
    for f in recs:
        for extra in ([], ["--proto", "redis,dns"], ["--snaplen", "128"]):
            cases.append((["ebtop", "-r", f, "--json", *extra]))
    failed = 0
    for argv in cases:
        a = normalised([os.path.join(base, argv[0]), *argv[1:]])
        b = normalised([os.path.join(new, argv[0]), *argv[1:]])
        if a != b:
            failed += 1
            print("DIFF", " ".join(argv))
    print(f"{len(cases)} comparisons, {failed} differ")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
