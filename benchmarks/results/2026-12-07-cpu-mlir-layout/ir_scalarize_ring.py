"""Split numba-cuda's loop-carried [4 x i32] phis (its ring slots, matching a regex of their names) into four i32 phis each,
as numba-cuda-mlir carries them:  python ir_scalarize_ring.py in.ll out.ll REGEX"""
import re, sys
src, dst, which = sys.argv[1], sys.argv[2], sys.argv[3]
s=open(src).read()
lines=s.split('\n')
blk=None; blkof={}; starts={}
for i,l in enumerate(lines):
    m=re.match(r'^([\w.]+):',l)
    if m: blk=m.group(1); starts[blk]=i
    blkof[i]=blk
phis=[(i,re.match(r'  (%[\w.]+) = phi \[4 x i32\] \[ (\S+), %([\w.]+) \], \[ (\S+), %([\w.]+) \]',l)) for i,l in enumerate(lines)]
phis=[(i,m) for i,m in phis if m and re.search(which, m.group(1))]
ins_before_term={}; header_new={}; rebuild={}
for i,m in phis:
    p,x,A,y,B=m.groups()
    for (v,P) in ((x,A),(y,B)):
        if v=='zeroinitializer': continue
        for k in range(4):
            ins_before_term.setdefault(P,[]).append(f'  {v}.e{k} = extractvalue [4 x i32] {v}, {k}')
    newphis=[]
    for k in range(4):
        vx = '0' if x=='zeroinitializer' else f'{x}.e{k}'
        vy = '0' if y=='zeroinitializer' else f'{y}.e{k}'
        newphis.append(f'  {p}.s{k} = phi i32 [ {vx}, %{A} ], [ {vy}, %{B} ]')
    header_new[i]=newphis
    chain=[f'  {p}.r0 = insertvalue [4 x i32] undef, i32 {p}.s0, 0']+[f'  {p}.r{k} = insertvalue [4 x i32] {p}.r{k-1}, i32 {p}.s{k}, {k}' for k in range(1,4)]
    rebuild.setdefault(blkof[i],[]).append((p,chain))
firstnonphi={}
for b,st in starts.items():
    j=st+1
    while ' = phi ' in lines[j]: j+=1
    firstnonphi[j]=b
term={}
for b,st in starts.items():
    j=st+1
    while j<len(lines) and not re.match(r'^([\w.]+):',lines[j]) and lines[j]!='}': j+=1
    k=j-1
    while not lines[k].strip(): k-=1
    term[k]=b
out=[]
for i,l in enumerate(lines):
    if i in firstnonphi and firstnonphi[i] in rebuild:
        for p,chain in rebuild[firstnonphi[i]]: out+=chain
    if i in term and term[i] in ins_before_term: out+=ins_before_term[term[i]]
    if i in header_new: out+=header_new[i]; continue
    out.append(l)
s='\n'.join(out)
for i,m in phis:
    p=m.group(1)
    s=re.sub(re.escape(p)+r'(?![\w.])', p+'.r3', s)
    s=s.replace(p+'.r3.s', p+'.s').replace(p+'.r3.r', p+'.r').replace(p+'.r3.e', p+'.e')
open(dst,'w').write(s); print(len(phis))
