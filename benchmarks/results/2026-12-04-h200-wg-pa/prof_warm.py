"""Where a warm plan build goes (LM head, wide plans): run twice against one cache dir; profile the second."""
import cProfile, pstats, sys, time
from numba_nbits.precompile import build_op, parse_shape
prof = sys.argv[1] == "prof"
for spec, Ms in (("128256x4096:4:128", (49, 65, 97)), ("14336x4096:4:128", (49,))):
    t = time.time(); op = build_op(parse_shape(spec)); print(spec, "op build", round(time.time() - t, 2), flush=True)
    for M in Ms:
        pr = cProfile.Profile(); t = time.time()
        if prof: pr.enable()
        op.warmup(M)
        if prof: pr.disable()
        print(spec, "M", M, round(time.time() - t, 2), "s", flush=True)
        if prof and M in (65, 49):
            pstats.Stats(pr).sort_stats("cumulative").print_stats(22)
            pstats.Stats(pr).sort_stats("tottime").print_stats(12)
