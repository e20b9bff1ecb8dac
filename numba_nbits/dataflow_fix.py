"""numba-cuda's variable dataflow (use/def sets, liveness, dead maps, SSA reconstruction) in fewer passes, same results.

numba's front end recomputes variable lifetimes after most of its passes (``PostProcessor.run``: use/def sets per
block, then the variables live at each block's entry, then where each dies), rebuilds SSA form once per variable
assigned more than once, and makes sure each block's scope defines every variable. numba-cuda 0.30 does each in a way
that is cheap on ordinary functions and slow on the generated kernels (long unrolled blocks, thousands of variables):

* ``analysis.compute_live_map`` runs two fix-point loops that sweep every block until a whole sweep changes nothing;
  the liveness sweep runs in block order while liveness flows backwards, so it takes as many sweeps as the CFG is
  deep, and the first loop's sets (every variable used or defined on the way to a block) hold thousands of names at
  each of hundreds of blocks;
* ``analysis.compute_dead_maps`` (where each variable dies) repeats set unions and differences of those sizes per
  block and edge;
* ``analysis.compute_use_defs`` lists each statement's variables through ``ir_utils.visit_vars_stmt``, which rebuilds
  every list and tuple of the statement as it goes;
* ``ssa._run_ssa`` rewrites every statement of the function once per such variable (about 70 in the warpgroup GEMM),
  calling its handler on statements that do not mention the variable and return unchanged;
* ``ir_utils.fixup_var_define_in_scope`` checks every variable of the function against the scope of every block, one
  scope shared by hundreds of blocks.

Inside ``active()`` (entered by ``backend`` around numba-cuda's compiles of our kernels) ``install()``'s replacements
compute the same results with worklists on bit sets (each block revisited only when an input of its equation changed),
a read-only collection of variable names, SSA rewrites that hand the handler only the statements that mention the
variable (the rest kept as they are, as the handler keeps them), and each distinct scope filled once. Outside
``active()``, e.g. for a user's own kernels, numba's functions run as shipped. Both fix points are least fixed points
of monotone equations, so any order reaches the same sets; the LLVM IR of real kernels is byte-identical with and
without the replacements (``tests/test_dataflow_fix.py``, which also compares the maps themselves). Only the exact
numba-cuda functions this module was written against are replaced (their source hashes); any other version is left as
it is, and numba-cuda-mlir (whose own copies of the live map and the scope fill already work on bit sets and distinct
scopes) and the simulator do not compile through them. Measured on the development machine:
``benchmarks/results/2026-12-05-cpu-dataflow``.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from contextlib import contextmanager

from .lowering_fix import source_sha256

#: sha256 of ``inspect.getsource`` of each numba-cuda function replaced or relied on, numba-cuda 0.30.4
KNOWN_SOURCE_SHA256 = {
    "analysis.compute_use_defs": "505fab203956ac84a8f67bd9df3e711d2cbaaafa2b9fc3f38479090ea97fd647",
    "analysis.compute_dead_maps": "5f103d40d5614c9762f61ab2a75e22feeb60928c8fdf58f11f6ecee5c62a2e93",
    "analysis.compute_live_map": "cdb51290c1658e9296610f99cb7c5bd51fbc2610822b3cedab72c4d86b4fc7c2",
    "ir_utils.visit_vars_stmt": "68807f5450ee3888a45f660e2ceb482ef3cb3fbb6a94a20ae46f5e5d846cfff8",
    "ir_utils.visit_vars_inner": "8f91667d0820b43cd21d6a048bbfad6a5084e260b9075beb09dfacd85025d2d3",
    "ir.Inst._rec_list_vars": "043539bffabcfcb18b6d7bcf6e24562f35064a66eb9b60a4d43ccc507e4c43fb",
    "ir.Expr.list_vars": "a32a9eae072e425ae456174e90890441b2136fb9127e70ef6680e9ab7fbddefa",
    "ir_utils.fixup_var_define_in_scope": "19e4d8d64a2fb063a62c4760097e977c81f84b5782e3dadebe2b10bee844536c",
    "ssa._run_ssa": "aa09fda773d906df5bb0a2b1b896394610af9399556779e50f93650696a2443c",
    "ssa._run_block_rewrite": "66a25c0bc90d6ed188fa1f0ec24b7c504911cfdd4be1f2bc1b26a3c5f8e73eb7",
    "ssa._run_ssa_block_pass": "3b7500b76333165d559f2ae47fc3fd859bd158c594fb5a4b05dcca2423df82e6",
    "ssa._FreshVarHandler": "8936fb396899a993d9383c11229e817ab0c4fa55fafb29d0dde00b28ff411412",
    "ssa._FixSSAVars": "7eafd3bc0af42aafb26a43a538484965848be0c60b5ebdd771e30196be4014e0",
}

#: modules that import a replaced function by name (their globals are rebound too)
_IMPORTERS = ("lowering", "core.untyped_passes", "core.transforms", "core.inline_closurecall", "core.ir_utils")

_LOCK = threading.Lock()
_TLS = threading.local()
_state = {"done": False, "installed": False, "reason": "not tried"}
_ORIGINAL: dict = {}


@contextmanager
def active():
    """Use the replacements in this thread for the block (numba's functions elsewhere)."""
    saved = getattr(_TLS, "on", False)
    _TLS.on = True
    try:
        yield
    finally:
        _TLS.on = saved


def _on() -> bool:
    return getattr(_TLS, "on", False)


def _visit_names(node, out: set, ir) -> None:
    """The names ``ir_utils.visit_vars_inner(node, ...)`` hands its callback, without rebuilding ``node``."""
    if isinstance(node, ir.var_types):
        out.add(node.name)
    elif isinstance(node, (list, tuple)):
        for n in node:
            _visit_names(n, out, ir)
    elif isinstance(node, ir.expr_types):
        for v in node._kws.values():
            _visit_names(v, out, ir)
    elif isinstance(node, ir.yield_types):
        _visit_names(node.value, out, ir)


def _rec_names(val, out: set, ir) -> None:
    """The names of ``ir.Inst._rec_list_vars(val)`` (numba-cuda's own ``Expr`` walked here, other nodes asked)."""
    if isinstance(val, ir.var_types):
        out.add(val.name)
    elif type(val) is ir.Expr:
        _rec_names(val._kws, out, ir)
    elif isinstance(val, ir.inst_types):
        out.update(v.name for v in val.list_vars())
    elif isinstance(val, (list, tuple)):
        for v in val:
            _rec_names(v, out, ir)
    elif isinstance(val, dict):
        for v in val.values():
            _rec_names(v, out, ir)


def compute_use_defs(blocks):
    """``analysis.compute_use_defs``: the same use and def sets per block. Assignments (nearly every statement) have
    their names collected read-only; other statements go through numba's ``compat_list_vars_stmt`` as before."""
    from numba.cuda.core import analysis, ir, ir_utils

    if not _on() or ir_utils.visit_vars_extensions:
        return _ORIGINAL["compute_use_defs"](blocks)
    ext = analysis.ir_extension_usedefs
    plain = ir.arg_types + ir.const_types + ir.global_types + ir.freevar_types
    var_use_map, var_def_map = {}, {}
    for offset, ir_block in blocks.items():
        var_use_map[offset] = use_set = set()
        var_def_map[offset] = def_set = set()
        for stmt in ir_block.body:
            if type(stmt) in ext:
                ext[type(stmt)](stmt, use_set, def_set)
                continue
            if isinstance(stmt, ir.assign_types):
                value = stmt.value
                if type(value) is ir.Expr:
                    rhs = set()
                    _rec_names(value._kws, rhs, ir)
                elif isinstance(value, ir.inst_types):
                    rhs = {v.name for v in value.list_vars()}
                elif isinstance(value, ir.var_types):
                    rhs = {value.name}
                elif isinstance(value, plain):
                    rhs = ()
                else:
                    raise AssertionError("unreachable", type(value))
                if stmt.target.name not in rhs:
                    def_set.add(stmt.target.name)
                names = {stmt.target.name}  # a Var (ir.Assign asserts it): never the list_vars fallback
                _visit_names(value, names, ir)
            else:
                names = {v.name for v in ir_utils.compat_list_vars_stmt(stmt)}
            for name in names:
                if name not in def_set:
                    use_set.add(name)
    return analysis._use_defs_result(usemap=var_use_map, defmap=var_def_map)


def _bit_sets(*maps):
    """Every name of the given maps (block -> set of names) numbered, and two functions: a set of names to the integer
    with their bits set, and back."""
    import numpy as np

    index: dict = {}
    for m in maps:
        for names in m.values():
            for n in names:
                if n not in index:
                    index[n] = len(index)
    table = np.empty(len(index), dtype=object)
    for n, i in index.items():
        table[i] = n
    nbytes = (len(index) + 7) // 8

    def bits(names) -> int:
        if not names:
            return 0
        flags = np.zeros(nbytes * 8, dtype=np.uint8)
        flags[[index[n] for n in names]] = 1
        return int.from_bytes(np.packbits(flags, bitorder="little").tobytes(), "little")

    def names_of(x: int) -> set:
        if not x:
            return set()
        flags = np.unpackbits(np.frombuffer(x.to_bytes(nbytes, "little"), dtype=np.uint8), bitorder="little")
        return set(table[np.flatnonzero(flags)].tolist())

    return bits, names_of


def compute_live_map(cfg, blocks, var_use_map, var_def_map):
    """``analysis.compute_live_map``: the variables live at each block's entry, as the least fixed points of the same
    two equations (definitions reaching a block: its own uses and defs and all its predecessors'; live at entry: its
    uses and, of each successor's live set, what reaches the block and it does not define), solved with worklists on
    bit sets (one bit per variable): the reaching sets hold nearly every variable of the kernel at every block."""
    if not _on():
        return _ORIGINAL["compute_live_map"](cfg, blocks, var_use_map, var_def_map)
    bits, names_of = _bit_sets(var_def_map, var_use_map)
    use = {b: bits(names) for b, names in var_use_map.items()}
    defs = {b: bits(names) for b, names in var_def_map.items()}
    reach = {b: defs[b] | use[b] for b in var_def_map}
    work = deque(var_def_map)
    queued = set(work)
    while work:
        b = work.popleft()
        queued.discard(b)
        cur = reach[b]
        for s, _ in cfg.successors(b):
            t = reach.get(s, 0)
            merged = t | cur
            if merged != t:
                reach[s] = merged
                if s not in queued and s in var_def_map:
                    work.append(s)
                    queued.add(s)
    live = {b: use[b] for b in blocks}
    work = deque(reversed(live))
    queued = set(work)
    while work:
        b = work.popleft()
        queued.discard(b)
        cur = live[b]
        for p, _ in cfg.predecessors(b):
            t = live[p]
            merged = t | (cur & reach.get(p, 0) & ~defs[p])
            if merged != t:
                live[p] = merged
                if p not in queued:
                    work.append(p)
                    queued.add(p)
    return {b: names_of(x) for b, x in live.items()}


def compute_dead_maps(cfg, blocks, live_map, var_def_map):
    """``analysis.compute_dead_maps``: the same internal, escaping and combined maps of where each variable dies (the
    same keys, inserted in the same order), computed on bit sets, and the same check that every live variable dies."""
    if not _on():
        return _ORIGINAL["compute_dead_maps"](cfg, blocks, live_map, var_def_map)
    from collections import defaultdict

    from numba.cuda.core import analysis

    terminators = {b: {v.name for v in blk.terminator.list_vars()} for b, blk in blocks.items()}
    bits, names_of = _bit_sets(live_map, var_def_map, terminators)
    live = {b: bits(v) for b, v in live_map.items()}
    defs = {b: bits(v) for b, v in var_def_map.items()}
    internal: dict = {}
    escaping: dict = {}
    exits: dict = {}
    for offset in blocks:
        cur_live = live[offset] | defs[offset]
        outgoing = dict((out, live[out]) for out, _ in cfg.successors(offset))
        term = bits(terminators[offset])
        combined = term
        for x in outgoing.values():
            combined |= x
        internal[offset] = internal_set = cur_live & ~combined
        escaping_live = cur_live & ~internal_set
        for out, out_live in outgoing.items():
            escaping[out] = escaping.get(out, 0) | (escaping_live & ~(out_live | defs[out]))
        if not outgoing:
            exits[offset] = term
    all_vars = dead = 0
    for x in live.values():
        all_vars |= x
    for m in (internal, escaping, exits):
        for x in m.values():
            dead |= x
    missing = all_vars & ~dead
    if missing and cfg.exit_points():
        raise RuntimeError("liveness info missing for vars: {0}".format(names_of(missing)))
    internal_dead_map = defaultdict(set, ((b, names_of(x)) for b, x in internal.items()))
    escaping_dead_map = defaultdict(set, ((b, names_of(x)) for b, x in escaping.items()))
    combined_map = dict((k, internal_dead_map[k] | escaping_dead_map[k]) for k in blocks)
    return analysis._dead_maps_result(internal=internal_dead_map, escaping=escaping_dead_map, combined=combined_map)


def _stmt_names(stmt, cache: dict, kinds: tuple) -> set:
    """Every name a statement mentions (an assignment: its target and what the SSA handlers list of its value);
    ``kinds``: the IR's (assignment, instruction, variable) classes."""
    got = cache.get(id(stmt))
    if got is not None and got[0] is stmt:
        return got[1]
    assign_t, inst_t, var_t = kinds
    if isinstance(stmt, assign_t):
        v = stmt.value
        if isinstance(v, inst_t):
            names = {x.name for x in v.list_vars()}
        elif isinstance(v, var_t):
            names = {v.name}
        else:
            names = set()
        names.add(stmt.target.name)
    else:
        names = {x.name for x in stmt.list_vars()}
    cache[id(stmt)] = (stmt, names)  # the statement kept alive with its id
    return names


def with_names_cache(tls, run_ssa, blocks):
    """``run_ssa(blocks)`` (an ``ssa._run_ssa``) with ``tls.ssa_names``, the statement-name cache of
    ``rewrite_mentioning``, fresh for the run (the outer one restored after)."""
    saved = getattr(tls, "ssa_names", None)
    tls.ssa_names = {}
    try:
        return run_ssa(blocks)
    finally:
        tls.ssa_names = saved


def rewrite_mentioning(blocks, states, handler, block_cls, cache: dict, kinds: tuple, enter=None) -> dict:
    """The SSA rewrite loop of ``ssa._run_block_rewrite`` (numba-cuda's, and numba-cuda-mlir's through ``mlir_fix``):
    new blocks (``block_cls``) in which the handler saw only the statements that mention ``states["varname"]``
    (both SSA handlers return any other statement unchanged), the other statement objects kept; ``enter(blk)`` is
    called before each block's statements."""
    varname = states["varname"]
    assign_t = kinds[0]
    newblocks = {}
    for label, blk in blocks.items():
        newblk = block_cls(scope=blk.scope, loc=blk.loc)
        states["label"] = label
        states["block"] = blk
        if enter is not None:
            enter(blk)
        newbody = []
        for stmt in blk.body:
            if varname in _stmt_names(stmt, cache, kinds):
                if isinstance(stmt, assign_t):
                    stmt = handler.on_assign(states, stmt)
                else:
                    stmt = handler.on_other(states, stmt)
                assert stmt is not None
            newbody.append(stmt)
        newblk.body = newbody
        newblocks[label] = newblk
    return newblocks


def _run_ssa(blocks):
    """``ssa._run_ssa`` with a cache of each statement's names for the rewrites below."""
    if not _on():
        return _ORIGINAL["_run_ssa"](blocks)
    return with_names_cache(_TLS, _ORIGINAL["_run_ssa"], blocks)


def _run_block_rewrite(blocks, states, handler):
    """``ssa._run_block_rewrite`` as ``rewrite_mentioning``."""
    from numba.cuda.core import ir, ssa

    cache = getattr(_TLS, "ssa_names", None)
    if cache is None or not _on() or ssa._logger.isEnabledFor(logging.DEBUG):
        return _ORIGINAL["_run_block_rewrite"](blocks, states, handler)
    return rewrite_mentioning(blocks, states, handler, ir.Block, cache, (ir.assign_types, ir.inst_types, ir.var_types))


def fixup_var_define_in_scope(blocks):
    """``ir_utils.fixup_var_define_in_scope``: the same definitions, each distinct scope filled once (numba fills
    the scope of every block, and our kernels' hundreds of blocks share one scope)."""
    if not _on():
        return _ORIGINAL["fixup_var_define_in_scope"](blocks)
    used_var = {}
    for blk in blocks.values():
        for inst in blk.body:
            for var in inst.list_vars():
                used_var[var] = inst
    seen = set()
    for blk in blocks.values():
        scope = blk.scope
        if id(scope) in seen:
            continue
        seen.add(id(scope))
        for var in used_var.keys():
            if var.name not in scope.localvars:
                scope.localvars.define(var.name, var)


def _targets():
    """(key, module, attribute) of each function checked, and whether it is replaced."""
    from numba.cuda.core import analysis, ir, ir_utils, ssa

    return [("analysis.compute_use_defs", analysis, "compute_use_defs", compute_use_defs),
            ("analysis.compute_live_map", analysis, "compute_live_map", compute_live_map),
            ("analysis.compute_dead_maps", analysis, "compute_dead_maps", compute_dead_maps),
            ("ir_utils.visit_vars_stmt", ir_utils, "visit_vars_stmt", None),
            ("ir_utils.visit_vars_inner", ir_utils, "visit_vars_inner", None),
            ("ir.Inst._rec_list_vars", ir.Inst, "_rec_list_vars", None),
            ("ir.Expr.list_vars", ir.Expr, "list_vars", None),
            ("ir_utils.fixup_var_define_in_scope", ir_utils, "fixup_var_define_in_scope", fixup_var_define_in_scope),
            ("ssa._run_ssa", ssa, "_run_ssa", _run_ssa),
            ("ssa._run_block_rewrite", ssa, "_run_block_rewrite", _run_block_rewrite),
            ("ssa._run_ssa_block_pass", ssa, "_run_ssa_block_pass", None),
            ("ssa._FreshVarHandler", ssa, "_FreshVarHandler", None),
            ("ssa._FixSSAVars", ssa, "_FixSSAVars", None)]


def install() -> bool:
    """Put the replacements in place if every function is the one this module was written against; True when they
    are. Idempotent and thread-safe; ``status()`` says why not."""
    with _LOCK:
        if _state["done"]:
            return _state["installed"]
        _state["done"] = True
        try:
            import importlib

            from numba_cuda import __version__ as version

            targets = _targets()
        except ImportError as e:
            _state["reason"] = f"numba-cuda not importable: {e}"
            return False
        for key, module, attr, _ in targets:
            if source_sha256(getattr(module, attr, None)) != KNOWN_SOURCE_SHA256.get(key):
                _state["reason"] = f"numba-cuda {version}: {key} is not the known one"
                return False
        for key, module, attr, new in targets:
            if new is not None:
                _ORIGINAL[attr] = getattr(module, attr)
                setattr(module, attr, new)
        for name in _IMPORTERS:
            module = importlib.import_module(f"numba.cuda.{name}")
            for attr in ("compute_use_defs", "compute_live_map", "fixup_var_define_in_scope"):
                if getattr(module, attr, None) is _ORIGINAL[attr]:
                    setattr(module, attr, globals()[attr])
        _state["installed"] = True
        _state["reason"] = f"installed on numba-cuda {version}"
        return True


def status() -> str:
    """Whether ``install`` put the replacements in place, and why (not)."""
    return _state["reason"]
