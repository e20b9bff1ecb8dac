"""Set one key of a tuned GEMV table in this tree (a device-side experiment; the tree is a throwaway copy):
python force_tactic.py FILE N K BLOCK M_CLASS TACTIC"""
import json
import sys

f, N, K, B, M, T = sys.argv[1:]
d = json.load(open(f))
rows = [r for r in d["tables"]["4"] if r[:4] != [int(N), int(K), int(B), int(M)]]
d["tables"]["4"] = rows + [[int(N), int(K), int(B), int(M), T]]
json.dump(d, open(f, "w"))
print("forced", f, N, K, B, M, T)
