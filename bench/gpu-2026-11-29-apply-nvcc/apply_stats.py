#!/usr/bin/env python3
"""Per-program stats from bench-gpu apply-run's apply.tsv.
Line: program, build, round, rc, wall_ms, then 'r3-corpus key=value ...'."""
import sys, math, statistics
from collections import defaultdict

path = sys.argv[1] if len(sys.argv) > 1 else "apply.tsv"
BUILDS = ("clang", "nvcc", "applied")
loop = defaultdict(list)                               # (prog,build) -> [loop_ms]
kern = defaultdict(lambda: defaultdict(list))          # (prog,build) -> kernel -> [ms]
fail = defaultdict(int)                                # (prog,build) -> failed lines
runs = defaultdict(set)                                # (prog,build) -> rounds
bad_rc = []
for ln in open(path):
    ln = ln.rstrip("\n")
    if not ln.strip():
        continue
    f = ln.split("\t")
    prog, build, rnd, rc = f[0], f[1], f[2], f[3]
    rest = "\t".join(f[5:])
    kv = dict(t.split("=", 1) for t in rest.split() if "=" in t)
    key = (prog, build)
    runs[key].add(rnd)
    ok = rc == "0" and kv.get("check") == "PASS"
    if rc != "0":
        bad_rc.append((prog, build, rnd, rc))
    if not ok:
        fail[key] += 1
    if "loop_ms" in kv:
        loop[key].append(float(kv["loop_ms"]))
    if "kernel" in kv and "ms" in kv:
        kern[key][kv["kernel"]].append(float(kv["ms"]))

progs = sorted({p for p, _ in runs})
rows = []
for p in progs:
    t = {}
    for b in BUILDS:
        k = (p, b)
        if k not in runs:
            t[b] = None
        elif loop[k]:
            t[b] = statistics.median(loop[k])
        elif kern[k]:
            t[b] = sum(statistics.median(v) for v in kern[k].values())
        else:
            t[b] = None
    kind = "loop" if loop[(p, "clang")] else "kern"
    passed = all(fail[(p, b)] == 0 and (p, b) in runs for b in BUILDS)
    if None in t.values():
        rows.append((p, kind, t, None, None, None, passed)); continue
    c, n, a = t["clang"], t["nvcc"], t["applied"]
    rows.append((p, kind, t, c / a, n / a, min(c, n) / a, passed))

timed = [r for r in rows if r[5] is not None]
timed.sort(key=lambda r: r[5])
print(f"{'program':<16} {'time':<4} {'clang ms':>10} {'nvcc ms':>10} {'applied ms':>10} "
      f"{'clang/app':>9} {'nvcc/app':>9} {'best/app':>9}  checks")
for p, kind, t, rc_, rn, rb, ok in timed:
    print(f"{p:<16} {kind:<4} {t['clang']:>10.4f} {t['nvcc']:>10.4f} {t['applied']:>10.4f} "
          f"{rc_:>9.3f} {rn:>9.3f} {rb:>9.3f}  {'pass' if ok else 'FAIL'}")
for r in rows:
    if r[5] is None:
        print(f"{r[0]:<16} missing a build: {r[2]}")

gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
print()
print(f"programs timed: {len(timed)}")
for b in BUILDS:
    nf = sum(1 for p in progs if fail[(p, b)] > 0)
    print(f"programs with any failed check/rc, {b}: {nf}")
print(f"nonzero exit codes: {len(bad_rc)}" + ("" if not bad_rc else f" {bad_rc}"))
print(f"geomean applied vs clang (clang/applied):        {gm([r[3] for r in timed]):.3f}")
print(f"geomean applied vs nvcc  (nvcc/applied):         {gm([r[4] for r in timed]):.3f}")
print(f"geomean nvcc vs clang    (clang/nvcc):           {gm([r[2]['clang']/r[2]['nvcc'] for r in timed]):.3f}")
print(f"geomean applied vs faster (min(clang,nvcc)/app): {gm([r[5] for r in timed]):.3f}")
slow = [r for r in timed if r[5] < 1 / 1.02]
print(f"applied >2% slower than the faster of clang and nvcc: {len(slow)}")
for p, kind, t, rc_, rn, rb, ok in slow:
    print(f"  {p:<16} best/applied {rb:.3f} (clang/applied {rc_:.3f}, nvcc/applied {rn:.3f})")
