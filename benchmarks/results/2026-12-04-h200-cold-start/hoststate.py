"""Diagnose the two host speeds: per 50 ms window, the CPU the process runs on, its frequency, a pure-Python
probe and op(A, out=Y) eager host time (call-graph path). Unpinned, then pinned to several CPUs."""
import os, sys, time
import numpy as np
from numba import cuda
import numba_nbits
from numba_nbits.precompile import build_op, parse_shape

def cpu_now():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])

def freq(c):
    try:
        with open(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq") as f:
            return int(f.read()) // 1000
    except OSError:
        return -1

def probe():
    def f(i):
        return i + 1
    t = time.perf_counter()
    for i in range(2000):
        f(i)
    return (time.perf_counter() - t) / 2000 * 1e6

op = build_op(parse_shape("1024x1024:4:128"))
A = cuda.to_device(np.random.default_rng(0).standard_normal((1, 1024)).astype(np.float16))
Y = cuda.device_array((1, 1024), np.float16)
for _ in range(50):
    op(A, out=Y)
cuda.synchronize()
print("nproc", os.cpu_count(), "affinity", sorted(os.sched_getaffinity(0)))
def windows(label, n=40):
    rows = []
    for w in range(n):
        c = cpu_now()
        p = probe()
        t = time.perf_counter()
        for _ in range(100):
            op(A, out=Y)
        h = (time.perf_counter() - t) / 100 * 1e6
        cuda.synchronize()
        rows.append((c, freq(c), p, h))
        time.sleep(0.02)
    cs = sorted({r[0] for r in rows})
    ps = sorted(r[2] for r in rows); hs = sorted(r[3] for r in rows)
    print(f"{label}: cpus {cs} probe us min/med/max {ps[0]:.3f}/{ps[len(ps)//2]:.3f}/{ps[-1]:.3f} "
          f"op host us min/med/max {hs[0]:.2f}/{hs[len(hs)//2]:.2f}/{hs[-1]:.2f}")
    for r in rows[:: max(1, n // 10)]:
        print("   cpu %d freq %d probe %.3f op %.2f" % r)
    sys.stdout.flush()
windows("unpinned")
allc = sorted(os.sched_getaffinity(0))
for c in allc[:: max(1, len(allc) // 6)]:
    os.sched_setaffinity(0, {c})
    windows(f"pinned cpu {c}", 20)
os.sched_setaffinity(0, set(allc))
windows("unpinned again")
