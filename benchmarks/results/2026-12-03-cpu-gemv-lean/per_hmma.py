import re, sys, statistics, ast
def load(f):
    d = {}
    for line in open(f):
        kv = dict(re.findall(r"(\w+)=(\{[^}]*\}|\S+)", line))
        if "tag" not in kv or "loop_ops" not in kv: continue
        ops = ast.literal_eval(kv["loop_ops"])
        kv["per_hmma"] = int(kv["main_loop"]) / max(1, ops.get("HMMA", 0))
        d[(kv["tag"], kv["bs"], kv["MT"], kv["dtype"])] = kv
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
rat, worse = [], []
for k in a:
    if k not in b: continue
    r = b[k]["per_hmma"] / a[k]["per_hmma"]
    rat.append(r)
    if r > 1.0: worse.append((k, round(a[k]["per_hmma"], 1), round(b[k]["per_hmma"], 1)))
print(f"n={len(rat)} instructions per HMMA in the main loop, {sys.argv[2]} / {sys.argv[1]}: median {statistics.median(rat):.3f} "
      f"min {min(rat):.3f} max {max(rat):.3f}; worse: {len(worse)}")
for w in worse: print("  worse", w)
