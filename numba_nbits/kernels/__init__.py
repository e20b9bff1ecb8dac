"""The kernel families behind the dispatch routes.

``get_family(name)`` imports the module of a route's family on first use (importing this package compiles
and imports nothing) and returns the ``KernelFamily`` record it exports as ``FAMILY``.
"""
from __future__ import annotations

import importlib

#: a route's family name -> the module (relative to this package) that exports its ``FAMILY``
FAMILY_MODULES = {
    "fpa_intb": ".fpa_intb",
    "router": ".gemv.router",
    "gemv_w4": ".gemv.w4",
    "gemv_w8": ".gemv.w8",
    "gemv_w2": ".gemv.w2",
    "fused_gemm": ".gemv.small_gemm",
    "dequant": ".dequant",
    "dequant_overlap": ".dequant_overlap",
}


def get_family(name: str):
    """The ``KernelFamily`` of the route family ``name`` (a key of ``FAMILY_MODULES``)."""
    try:
        module = FAMILY_MODULES[name]
    except KeyError:
        raise ValueError(f"unknown kernel family {name!r}; families are {', '.join(FAMILY_MODULES)}") from None
    return importlib.import_module(module, __name__).FAMILY
