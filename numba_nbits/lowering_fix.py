"""A linear-time version of one quadratic step in numba-cuda's lowering, installed before the first compile.

Lowering a function, numba-cuda first finds the variables it may keep in registers instead of stack slots:
those assigned exactly once, in one block, and used only there (``Lower._find_singly_assigned_variable``).
numba-cuda 0.30 checks "assigned once in its block" by rescanning every assignment of the block for each
candidate variable, which is quadratic in the block's length. The generated GEMV and GEMM kernels are long
unrolled blocks: in the largest specialisations this one step is over a third of the whole compile
(``benchmarks/results/2026-12-01-cpu-compile-time``).

``install()`` replaces the method with one that counts each block's assignment targets once. The result
is the same set of variables, so the generated LLVM IR and PTX are byte-identical (checked by
``tests/test_lowering_fix.py`` on real kernels). It replaces only the exact method it was written against:
any other numba-cuda version's method (whose source hash differs) is left as it is, and numba-cuda-mlir and
the simulator do not lower through it.
"""
from __future__ import annotations

import hashlib
import inspect
import threading
from collections import Counter, defaultdict

#: sha256 of ``inspect.getsource(Lower._find_singly_assigned_variable)`` in numba-cuda 0.30.4
KNOWN_SOURCE_SHA256 = {"0.30.4": "c3b499f76517288510a5188fbb59bb96f7ca7d619b0cf4245b5f66a8bd90bbe4"}

_LOCK = threading.Lock()
_state = {"done": False, "installed": False, "reason": "not tried"}


def source_sha256(fn) -> str | None:
    """sha256 of ``inspect.getsource(fn)`` (None where there is no source): how this module, ``typing_memo``,
    ``dataflow_fix`` and ``mlir_fix`` recognise the exact compiler functions they were written against."""
    try:
        return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def _find_singly_assigned_variable(self):
    """``Lower._find_singly_assigned_variable`` with each block's assignment targets counted once."""
    from numba.cuda.core import ir
    from numba.cuda.core.analysis import compute_use_defs, must_use_alloca

    sav = set()
    if not self.func_ir.func_id.is_generator:
        blocks = self.func_ir.blocks
        use_defs = compute_use_defs(blocks)
        alloca_vars = must_use_alloca(blocks)
        var_assign_map = defaultdict(set)  # variable -> blocks that define it
        for blk, vl in use_defs.defmap.items():
            for var in vl:
                var_assign_map[var].add(blk)
        used_across = set()  # variables some block uses before defining them (the usemap)
        for vl in use_defs.usemap.values():
            used_across.update(vl)
        targets: dict = {}  # block label -> Counter of its assignment targets, counted on first need
        for var, blks in var_assign_map.items():
            if var in alloca_vars or len(blks) != 1 or var in used_across:
                continue
            [defblk] = blks
            counts = targets.get(defblk)
            if counts is None:
                counts = targets[defblk] = Counter(
                    stmt.target.name for stmt in self.blocks[defblk].find_insts(ir.assign_types))
            if counts[var] == 1:
                sav.add(var)
    self._singly_assigned_vars = sav
    self._blk_local_varmap = {}


def install() -> bool:
    """Replace the method if it is the one this module was written against; True when the replacement is
    in place. Idempotent and thread-safe; ``status()`` says why not."""
    with _LOCK:
        if _state["done"]:
            return _state["installed"]
        _state["done"] = True
        try:
            from numba.cuda import lowering
            from numba_cuda import __version__ as version
        except ImportError as e:
            _state["reason"] = f"numba-cuda not importable: {e}"
            return False
        original = getattr(lowering.Lower, "_find_singly_assigned_variable", None)
        digest = source_sha256(original) if original is not None else None
        if digest is None or digest not in KNOWN_SOURCE_SHA256.values():
            _state["reason"] = f"numba-cuda {version}: Lower._find_singly_assigned_variable is not the known one"
            return False
        lowering.Lower._find_singly_assigned_variable = _find_singly_assigned_variable
        _state["installed"] = True
        _state["reason"] = f"installed on numba-cuda {version}"
        return True


def status() -> str:
    """Whether ``install`` replaced the method, and why (not)."""
    return _state["reason"]
