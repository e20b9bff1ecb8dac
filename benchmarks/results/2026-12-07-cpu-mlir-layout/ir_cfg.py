"""The blocks of an LLVM IR text module's first function, their successors and inline-asm global loads: python ir_cfg.py k.ll"""
import re, sys
text = open(sys.argv[1]).read()
fn = text[text.index("define "):]
fn = fn[:fn.index("\n}\n")]
blocks = {}; order = []; cur = "entry"; blocks[cur] = []; order.append(cur)
for line in fn.splitlines()[1:]:
    m = re.match(r"; <label>:(\d+):", line) or re.match(r'^"?([\w.$]+)"?:', line)
    if m:
        cur = m.group(1); blocks[cur] = []; order.append(cur); continue
    blocks[cur].append(line)
succ = {}
for b in order:
    term = [l for l in blocks[b] if l.strip().startswith("br ") or l.strip().startswith("ret") or "switch" in l]
    t = term[-1] if term else ""
    succ[b] = re.findall(r'label %"?([\w.$]+)"?', t)
for b in order:
    n_asm = sum("ld.global" in l for l in blocks[b])
    print(b, len(blocks[b]), "->", succ[b], f"ldg={n_asm}" if n_asm else "")
