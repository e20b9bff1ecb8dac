"""numba-cuda-mlir's front end on our kernels in fewer steps, same PTX: device functions, SSA reconstruction.

numba-cuda-mlir 0.6.0 compiles through its own copy of numba's front end (``numba_cuda_mlir.numba_cuda.core``), and
inlines every ``inline="always"`` device function (``backend.jit_options`` maps our ``forceinline`` to it) into the
kernel's untyped IR. On the generated kernels (long unrolled blocks, hundreds of inlined calls, thousands of
variables) three steps of it cost most of the front end (cProfile of a two-m-tile tensor-core GEMV kernel, 17.4 s
profiled: SSA reconstruction 4.3 s, inlining 4.9 s, of which 2.9 s re-running the untyped pipeline):

* ``InlineWorker.inline_function`` translates the callee's bytecode and runs the untyped pipeline over it (including
  the callee's own inlining) once per call site: 183 call sites of 8 distinct device functions in that kernel, then
  ``inline_ir`` deep-copies the callee's blocks twice, the second copy returned to a caller that drops it;
* ``ssa._run_ssa`` rewrites every statement of the function once per variable assigned more than once, calling the
  handler on statements that do not mention the variable and return unchanged;
* ``ssa._FixSSAVars._stmt_index`` finds a statement's position in its block by a linear scan, twice or more per use
  it fixes: quadratic in the length of the unrolled blocks;
* ``PreLowerStripPhis._strip_phi_nodes`` scans a whole block twice per value a phi exports from it, comparing every
  statement by IR equality (two dictionaries built per comparison): 0.27 of 4.7 s on that kernel.

Inside ``active()`` (entered by ``backend`` around numba-cuda-mlir's compiles of our kernels) ``install()``'s
replacements do the same work once: the untyped IR of each device function is made once per compile and inlined
by ``inline_ir``'s steps with one copy of its blocks (the first thing done, so the kept IR is never modified; each
call site still gets a ``FunctionIdentity`` of its own, which names its inlined variables); the SSA
rewrites hand the handler only the statements that mention the variable (the rest kept as they are, as both
handlers keep them); and a statement's position comes from a table of the block being rewritten (the block is not
changed while it is rewritten), with the scan's own bounds; phis are stripped comparing only statements that can be
equal (same type and variable name). The PTX of real kernels is byte-identical with and
without them (``tests/test_mlir_fix.py``). Only the exact numba-cuda-mlir functions this module was written against
are replaced (their source hashes); any other version is left as it is, and outside ``active()`` (a user's own
kernels) numba-cuda-mlir runs as shipped. Measured on the development machine: ``benchmarks/results/
2026-12-05-cpu-mlir-frontend``.
"""
from __future__ import annotations

import logging
import threading
from contextlib import contextmanager

from .dataflow_fix import rewrite_mentioning, with_names_cache
from .lowering_fix import source_sha256

#: sha256 of ``inspect.getsource`` of each numba-cuda-mlir function replaced or relied on, numba-cuda-mlir 0.6.0
KNOWN_SOURCE_SHA256 = {
    "inline_closurecall.InlineWorker.inline_function":
        "e23b24043fa108c9931c62b3099f5752ac80bd7cafd07ebde9d3753767f1200e",
    "inline_closurecall.InlineWorker.inline_ir": "0a40a42bbeecc22a2da024314010756dfe2df9e3aec0ea8d4eb940c34ab837f7",
    "inline_closurecall.InlineWorker.run_untyped_passes":
        "29114f1e74f943c0f0fe181a4a16d4a79e0d1c36c1246952a0a34224c89cad1a",
    "ssa._run_ssa": "bd2d6872562f13f0e0ef4be1eda1ad5f825412104a997c22a5c9c0c8cc279b1b",
    "ssa._run_block_rewrite": "66a25c0bc90d6ed188fa1f0ec24b7c504911cfdd4be1f2bc1b26a3c5f8e73eb7",
    "ssa._run_ssa_block_pass": "b48d590f81cc8b20eec89e93e56d484f0d45210c5646bdb10850afecafa7fe24",
    "ssa._FreshVarHandler": "ddca0005f4ae3ed18186b820a14a8e401692293e3df78effa5b855ec18b2fc1b",
    "ssa._FixSSAVars": "6fbdd0e7df90e601230e59d2160dde02b629f3ecf31ec7d338432c3bc5043cf6",
    "ssa._FixSSAVars._stmt_index": "16ee1e1b84752e043e261e8e62957b7c7b4fbeb1b758666e22bb1f938a47382a",
    "typed_passes.PreLowerStripPhis._strip_phi_nodes":
        "b66c846afe13ed3ba49f525fea45338a1ef0fb7da8d482bbef1e4c5759335d8e",
    "ir.Block.insert_after": "0baa33368fab9b663cbe86bb5d3ee0209e9dbaa59b7f5affc2da8e8c1dd507f6",
    "ir.Block.prepend": "67c3cc6396c36164cdd4a17a1e3bb5ffbfc353718a380ec9a6e3633d7cf6f746",
    "ir.Block.find_insts": "5683a0bd9ac0aa302e2e654f0bd07f20160a6745dfb067c69b111cf6a9bc72f5",
    "ir.EqualityCheckMixin.__eq__": "1a122441b0867d3b53aafb09e53da9b3be03bd3fc8fde16e7388b42ddf6ae955",
    "ir.Var.__init__": "552675c8ce881a3cb8f413eeb7cb3b695ba60d904e2bef666ff4e991fa9356bb",
    "ir.Assign.__init__": "e4ff173f634911d7eba8225f43b2a490652400f0b16d7e694f899de9aa6523a5",
}

_LOCK = threading.Lock()
_TLS = threading.local()
_state = {"done": False, "installed": False, "reason": "not tried"}
_ORIGINAL: dict = {}


@contextmanager
def active():
    """Use the replacements in this thread for the block (one compile: the device functions' IR is kept until the
    outermost block ends); numba-cuda-mlir's own functions elsewhere."""
    outer = getattr(_TLS, "inline_memo", None) is None
    if outer:
        _TLS.inline_memo = {}
    try:
        yield
    finally:
        if outer:
            _TLS.inline_memo = None


def _on() -> bool:
    return getattr(_TLS, "inline_memo", None) is not None


def inline_function(self, caller_ir, block, i, function, arg_typs=None):
    """``InlineWorker.inline_function``: the callee's untyped IR made once per compile (per function and the worker's
    typing context, target context, locals, pipeline and flags), a shallow copy with a fresh ``FunctionIdentity`` for
    each call site, inlined by ``_inline_untyped`` (a typed inline, or with numba-cuda-mlir's inline debugging on, by
    its ``inline_ir``)."""
    if not _on():
        return _ORIGINAL["inline_function"](self, caller_ir, block, i, function, arg_typs)
    from numba_cuda_mlir.numba_cuda.core import bytecode

    memo = _TLS.inline_memo
    ctx = (self.typingctx, self.targetctx, self.locals, self.pipeline, self.flags)
    key = (function, *map(id, ctx))
    hit = memo.get(key)
    if hit is None:
        callee_ir = self.run_untyped_passes(function)
        memo[key] = (callee_ir, ctx)  # the context objects kept alive with their ids
    else:
        self.flags.enable_ssa = False  # as run_untyped_passes(function) leaves the flags it is handed
        callee_ir = hit[0].copy()
        callee_ir.func_id = bytecode.FunctionIdentity.from_function(function)
    if self._permit_update_type_and_call_maps or arg_typs is not None or _debug_inline():  # numba-cuda-mlir's own
        return self.inline_ir(caller_ir, block, i, callee_ir, function.__code__.co_freevars, arg_typs=arg_typs)
    return _inline_untyped(self, caller_ir, block, i, callee_ir, function.__code__.co_freevars)


def _debug_inline() -> bool:
    from numba_cuda_mlir.numba_cuda import config

    return bool(getattr(config, "DEBUG_INLINE_CLOSURE", False))


def _inline_untyped(self, caller_ir, block, i, callee_ir, callee_freevars):
    """``InlineWorker.inline_ir`` for an untyped inline (no type or call maps to update), step by step the same,
    with one copy of the callee's blocks instead of two: ``inline_ir`` also returns an unchanged second copy, which
    ``InlineInlinables`` (the only caller of ``inline_function``) drops, so ``None`` stands in its place."""
    import copy

    from numba_cuda_mlir.numba_cuda.core import inline_closurecall as icc
    from numba_cuda_mlir.numba_cuda.core import ir, ir_utils

    kernel_copy = callee_ir.copy()
    kernel_copy.blocks = {label: copy.deepcopy(blk) for label, blk in callee_ir.blocks.items()}
    callee_ir = kernel_copy
    if self.validator is not None:
        self.validator(callee_ir)
    scope = block.scope
    instr = block.body[i]
    call_expr = instr.value
    callee_blocks = callee_ir.blocks
    max_label = max(ir_utils._the_max_label.next(), max(caller_ir.blocks.keys()))
    callee_blocks = icc.add_offset_to_labels(callee_blocks, max_label + 1)
    callee_blocks = icc.simplify_CFG(callee_blocks)
    callee_ir.blocks = callee_blocks
    min_label = min(callee_blocks.keys())
    max_label = max(callee_blocks.keys())
    ir_utils._the_max_label.update(max_label)
    callee_scopes = icc._get_all_scopes(callee_blocks)
    assert len(callee_scopes) == 1
    callee_scope = callee_scopes[0]
    var_dict = {}
    for var in tuple(callee_scope.localvars._con.values()):
        if var.name not in callee_freevars:
            inlined_name = icc._created_inlined_var_name(callee_ir.func_id.unique_name, var.name)
            new_var = scope.redefine(inlined_name, loc=var.loc)
            callee_scope.redefine(inlined_name, loc=var.loc)
            var_dict[var.name] = new_var
    icc.replace_vars(callee_blocks, var_dict)
    args = icc._get_callee_args(call_expr, callee_ir.func_id.func, block.body[i].loc, caller_ir)
    icc._replace_args_with(callee_blocks, args)
    new_blocks = []
    new_block = ir.Block(scope, block.loc)
    new_block.body = block.body[i + 1:]
    new_label = icc.next_label()
    caller_ir.blocks[new_label] = new_block
    new_blocks.append((new_label, new_block))
    block.body = block.body[:i]
    block.body.append(ir.Jump(min_label, instr.loc))
    topo_order = icc.find_topo_order(callee_blocks)
    icc._replace_returns(callee_blocks, instr.target, new_label)
    if instr.target.name in caller_ir._definitions and call_expr in caller_ir._definitions[instr.target.name]:
        caller_ir._definitions[instr.target.name].remove(call_expr)
    for label in topo_order:
        blk = callee_blocks[label]
        blk.scope = scope
        icc._add_definitions(caller_ir, blk)
        caller_ir.blocks[label] = blk
        new_blocks.append((label, blk))
    return None, callee_blocks, var_dict, new_blocks


def _run_ssa(blocks):
    """``ssa._run_ssa`` with a cache of each statement's names for the rewrites below."""
    if not _on():
        return _ORIGINAL["_run_ssa"](blocks)
    return with_names_cache(_TLS, _ORIGINAL["_run_ssa"], blocks)


def _run_block_rewrite(blocks, states, handler):
    """``ssa._run_block_rewrite`` as ``dataflow_fix.rewrite_mentioning``, with the position table of each block
    being rewritten (``_stmt_index``) reset as the block is entered."""
    from numba_cuda_mlir.numba_cuda.core import ir, ssa

    cache = getattr(_TLS, "ssa_names", None)
    if cache is None or not _on() or ssa._logger.isEnabledFor(logging.DEBUG):
        return _ORIGINAL["_run_block_rewrite"](blocks, states, handler)

    def enter(blk):
        _TLS.positions = [blk, None]  # filled by _stmt_index when first asked

    saved = getattr(_TLS, "positions", None)
    try:
        return rewrite_mentioning(blocks, states, handler, ir.Block, cache, (ir.Assign, ir.Inst, ir.Var), enter)
    finally:
        _TLS.positions = saved


def _stmt_index(self, defstmt, block, stop=-1):
    """``_FixSSAVars._stmt_index``: the first position of ``defstmt`` among ``range(len(block.body))[:stop]``, else
    ``len(block.body)``, from a table of the block being rewritten (which nothing changes meanwhile)."""
    pos = getattr(_TLS, "positions", None)
    if pos is None or pos[0] is not block:
        return _ORIGINAL["_stmt_index"](self, defstmt, block, stop)
    body = block.body
    if pos[1] is None:
        table = {}
        for j, s in enumerate(body):
            table.setdefault(id(s), j)
        pos[1] = table
    n = len(body)
    j = pos[1].get(id(defstmt))
    return j if j is not None and j < len(range(n)[:stop]) else n


def _strip_phi_nodes(self, func_ir):
    """``PreLowerStripPhis._strip_phi_nodes``: the same blocks, statement for statement. For each value a phi exports
    from a block numba-cuda-mlir scans the whole block twice, comparing by IR equality (two dictionaries built per
    comparison): once for the assignments to that value, once (``list.index``) for where the last one stands. Here a
    comparison is made only where it can hold: IR equality of a variable, or of an assignment, needs equal types and
    equal variable names (the rest of the comparison is done as before); other statements whose equality is
    numba-cuda-mlir's strict-type one cannot equal an assignment."""
    if not _on():
        return _ORIGINAL["_strip_phi_nodes"](self, func_ir)
    from collections import defaultdict
    from copy import copy

    from numba_cuda_mlir.numba_cuda.core import ir

    strict = (ir.EqualityCheckMixin.__eq__, ir.SlotEqualityCheckMixin.__eq__)

    def index(body, other):  # body.index(other): the first element that is other or == other
        tname = other.target.name
        for j, el in enumerate(body):
            if el is other:
                return j
            if type(el).__eq__ in strict:
                if type(el) is type(other) and el.target.name == tname and el == other:
                    return j
            elif el == other:
                return j
        raise ValueError(f"{other!r} is not in list")

    exporters = defaultdict(list)
    phis = set()
    for block in func_ir.blocks.values():
        for assign in block.find_insts(ir.Assign):
            if isinstance(assign.value, ir.Expr):
                if assign.value.op == "phi":
                    phis.add(assign)
                    phi = assign.value
                    for ib, iv in zip(phi.incoming_blocks, phi.incoming_values):
                        exporters[ib].append((assign.target, iv))
    newblocks = {}
    for label, block in func_ir.blocks.items():
        newblk = copy(block)
        newblocks[label] = newblk
        newblk.body = [stmt for stmt in block.body if stmt not in phis]
        term_loc = block.terminator.loc if block.is_terminated else block.loc
        for target, rhs in exporters[label]:
            if rhs is ir.UNDEFINED:
                rhs = ir.Expr.null(loc=func_ir.loc)
            last = None
            rtype = type(rhs)
            for stmt in newblk.body:
                if isinstance(stmt, ir.Assign):
                    t = stmt.target
                    if type(t).__eq__ not in strict:
                        if t == rhs:
                            last = stmt
                    elif type(t) is rtype and t.name == rhs.name and t == rhs:
                        last = stmt
            if last is not None:
                assign = ir.Assign(target=target, value=rhs, loc=rhs.loc)
                newblk.body.insert(index(newblk.body, last) + 1, assign)
            else:
                assign = ir.Assign(target=target, value=rhs, loc=term_loc)
                newblk.prepend(assign)
    func_ir.blocks = newblocks
    return func_ir


def _targets():
    """(key, owner, attribute, replacement or None) of each function checked."""
    from numba_cuda_mlir.numba_cuda.core import inline_closurecall as icc
    from numba_cuda_mlir.numba_cuda.core import ir, ssa
    from numba_cuda_mlir.numba_cuda.core import typed_passes as tp

    w = icc.InlineWorker
    return [("inline_closurecall.InlineWorker.inline_function", w, "inline_function", inline_function),
            ("inline_closurecall.InlineWorker.inline_ir", w, "inline_ir", None),
            ("inline_closurecall.InlineWorker.run_untyped_passes", w, "run_untyped_passes", None),
            ("ssa._run_ssa", ssa, "_run_ssa", _run_ssa),
            ("ssa._run_block_rewrite", ssa, "_run_block_rewrite", _run_block_rewrite),
            ("ssa._run_ssa_block_pass", ssa, "_run_ssa_block_pass", None),
            ("ssa._FreshVarHandler", ssa, "_FreshVarHandler", None),
            ("ssa._FixSSAVars", ssa, "_FixSSAVars", None),
            ("ssa._FixSSAVars._stmt_index", ssa._FixSSAVars, "_stmt_index", _stmt_index),
            ("typed_passes.PreLowerStripPhis._strip_phi_nodes", tp.PreLowerStripPhis, "_strip_phi_nodes",
             _strip_phi_nodes),
            ("ir.Block.insert_after", ir.Block, "insert_after", None),
            ("ir.Block.prepend", ir.Block, "prepend", None),
            ("ir.Block.find_insts", ir.Block, "find_insts", None),
            ("ir.EqualityCheckMixin.__eq__", ir.EqualityCheckMixin, "__eq__", None),
            ("ir.Var.__init__", ir.Var, "__init__", None),
            ("ir.Assign.__init__", ir.Assign, "__init__", None)]


def install_replacements(state: dict, lock, targets, known: dict, original: dict) -> bool:
    """Put the replacements of ``targets()`` (``(key, owner, attribute, replacement or None)``, the ones with None only
    checked) in place if every function's source hash is ``known[key]``, the originals kept in ``original`` by
    attribute name; ``state`` records whether and why (not). Idempotent and thread-safe under ``lock``; shared with
    ``mlir_layout``."""
    with lock:
        if state["done"]:
            return state["installed"]
        state["done"] = True
        try:
            from numba_cuda_mlir import __version__ as version

            found = targets()
        except ImportError as e:
            state["reason"] = f"numba-cuda-mlir not importable: {e}"
            return False
        for key, owner, attr, _ in found:
            if source_sha256(getattr(owner, attr, None)) != known.get(key):
                state["reason"] = f"numba-cuda-mlir {version}: {key} is not the known one"
                return False
        for key, owner, attr, new in found:
            if new is not None:
                original[attr] = getattr(owner, attr)
                setattr(owner, attr, new)
        state["installed"] = True
        state["reason"] = f"installed on numba-cuda-mlir {version}"
        return True


def install() -> bool:
    """Put the replacements in place if every function is the one this module was written against; True when they
    are. Idempotent and thread-safe; ``status()`` says why not."""
    return install_replacements(_state, _LOCK, _targets, KNOWN_SOURCE_SHA256, _ORIGINAL)


def status() -> str:
    """Whether ``install`` put the replacements in place, and why (not)."""
    return _state["reason"]
