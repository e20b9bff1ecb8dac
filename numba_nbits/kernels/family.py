"""What every kernel family gives the dispatcher: a ``KernelFamily`` record and plans built on ``Plan``.

A route (``dispatch/routes.py``) names a family. The family says whether its kernels can serve a
problem (``supports``: the kernel's own needs, beyond the spec's guards that the route already
checked) and builds the plan for one M (``build(weights, problem, config, route)``). The plan holds
its launches with their parameters pre-packed; ``run`` rewrites the A / Y pointers and launches them.

When the route serves bias with the separate bias-add kernel (ORT's "retry without bias"), the
dispatcher attaches that launch to the plan once with ``add_bias(weights, M)``; ``run`` then follows the
family's launches with it. Nothing else in the package wires bias.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


class Plan:
    """Base of every family's plan for one (problem, M).

    Subclasses set ``route``, ``kernel`` (the kernel's name) and ``tactic`` (its launch shape, or
    ``"n/a"``) and implement ``enqueue``; ``debug_fields`` feeds the ``ORT_FPA_INTB_DEBUG`` line.
    """

    route: str = ""
    kernel: str = ""
    tactic: str = "n/a"
    #: the packing SM and weight layout the debug line reports; a plan reading ORT's layout keeps these
    packing_sm: Any = "n/a"
    weight_format: str = "ort"
    bias_launch: Any = None

    def enqueue(self, a, out, stream: int) -> None:
        """Launch the family's kernels for activation ``a`` (M, K) into ``out`` (M, N) on ``stream``."""
        raise NotImplementedError(f"{type(self).__name__} must implement enqueue(a, out, stream)")

    def run(self, a, out, stream: int) -> None:
        """``enqueue``, then the attached bias-add launch (if any) on the same stream."""
        self.enqueue(a, out, stream)
        b = self.bias_launch
        if b is not None:
            b.set_array(0, out.flat())
            b.launch(stream)

    def pointer_runner(self, a_like, o_like):
        """The lean form of ``run`` for the steady-state call path (``bound.py``), GPU only: for A and Y laid
        out as the 2-D views ``a_like`` / ``o_like``, ``run(pa, po, stream) -> bool`` launches the plan (and
        the attached bias-add) at data pointers ``pa`` / ``po``; it returns False, having launched nothing,
        where those pointers need the general ``run`` (e.g. an unaligned A). None: no lean form (the
        family's ``enqueue_runner`` gives none, or the simulator). Each runner owns its parameter buffers:
        keep one per thread."""
        r = self.enqueue_runner(a_like, o_like)
        b = self.bias_launch
        if r is None or b is None:
            return r
        go_bias = b.pointer_launcher(((0, o_like.flat()),))
        if go_bias is None:
            return None

        def run(pa, po, stream):
            if not r(pa, po, stream):
                return False
            go_bias(po, stream)
            return True

        return run

    def enqueue_runner(self, a_like, o_like):
        """``pointer_runner`` without the bias-add: a family with a lean launch overrides this."""
        return None

    def add_bias(self, weights, M: int) -> None:
        """Attach the bias-add launch for ``weights.bias`` over an (M, N) output (argument 0 is pointed at
        each call's Y by ``run``); the plan's kernel name gains ``+bias_add``."""
        from .bias import bind_bias_add

        w = weights
        self.bias_launch = bind_bias_add(w.bias, w.bias, act=w.dtype, total=M * w.N, n=w.N)
        self.kernel = f"{self.kernel}+bias_add"

    def debug_fields(self) -> dict:
        """The plan's fields of the ``ORT_FPA_INTB_DEBUG`` line: ``packing_sm``, ``weight_format``, ``kernel``
        and ``tactic``."""
        return {"packing_sm": self.packing_sm, "weight_format": self.weight_format, "kernel": self.kernel,
                "tactic": self.tactic}


@dataclass(frozen=True)
class KernelFamily:
    """A family of kernels as the dispatcher sees it."""

    name: str
    #: ``supports(problem) -> bool``: whether the family's kernels can serve the problem
    supports: Callable[[Any], bool]
    #: ``build(weights, problem, config, route) -> Plan`` for one M; ``route`` is the dispatch route's name
    build: Callable[..., Plan]
    #: where its code is, relative to ``numba_nbits/kernels/``: the family module first, then the kernel
    #: generators it builds from (the README's route table names them)
    sources: tuple = ()
