"""Which compiler serves ``cuda``: numba-cuda or numba-cuda-mlir (``NUMBA_NBITS_BACKEND=numba|mlir``).

Kernel source is written once against the ``cuda`` API both compilers share (``cuda.grid``,
``cuda.shared.array``, ``cuda.syncthreads``, device functions ``@cuda.jit(device=True)``); the inline
PTX both need comes from ``kernels/intrinsics.py``, which emits it through llvmlite on numba-cuda and
through ``cuda.experimental.inline_ptx`` on numba-cuda-mlir.

* ``NAME``: the backend of this process, read once from ``NUMBA_NBITS_BACKEND`` when this module is first
  imported (empty or unset: ``default_backend()``). Any other value is an error that names the variable and
  the choices. The default is numba-cuda wherever it can compile (numpy < 2.5): measured side by side on the
  quick perf set's default calls, numba-cuda-mlir's kernels took 1.019x its time (median; worst 1.108x, all
  of the slower rows tensor-core GEMV) and compiled in 2.0x its time
  (``benchmarks/results/2026-12-03-h200-backend-v3/``). Under numpy >= 2.5,
  where numba-cuda 0.30 cannot compile, the default is numba-cuda-mlir when it is installed (the ``cu12`` /
  ``cu13`` extras pull it), so upgrading numpy keeps a working GPU install. Importing this module does no
  device work and imports neither compiler (``importlib.util.find_spec`` only looks numba-cuda-mlir up).
* The CUDA simulator exists only in numba-cuda, so under ``NUMBA_ENABLE_CUDASIM=1`` kernels always run
  on numba-cuda's simulator whatever ``NAME`` says: ``compiler()`` is then ``"numba"``.
* ``cuda()`` / ``types()``: the selected compiler's ``cuda`` module and its types module (numba-cuda's
  ``numba.cuda`` / ``numba.cuda.types``, numba-cuda-mlir's ``numba_cuda_mlir.cuda`` /
  ``numba_cuda_mlir.types``).
* ``jit_options(options)``: ``cuda.jit`` keywords as numba-cuda spells them, for the selected compiler.
  numba-cuda-mlir accepts ``lineinfo``, ``launch_bounds``, ``max_registers``, ``fastmath``, ``lto``,
  ``extensions`` and ``debug`` under the same names (its ``decorators._get_schema``); ``forceinline``
  becomes ``inline="always"``; ``opt`` maps to ``opt_level`` there (it does that itself).
* ``argtypes(ts)``: numba-cuda argument types (``types.float16[:, ::1]``, ``types.int64``) as the
  selected compiler's types (same dtype name, ndim and layout).
* ``array_slots(ndim)`` and ``array_ptr_slot()``: how an array argument is passed to a kernel. numba-cuda
  flattens its array struct into ``5 + 2 * ndim`` 8-byte parameters ``meminfo, parent, nitems, itemsize,
  data, shape..., strides (bytes)...``; numba-cuda-mlir passes a memref descriptor, ``3 + 2 * ndim``
  parameters ``allocated, aligned, offset, shape..., strides (elements)...`` (read off the ``.param``
  list and the index arithmetic of its PTX for ``float32[::1]``: kernels read ``aligned`` and ``offset``,
  never ``allocated``, so a pointer update rewrites ``aligned`` only). ``array_params`` builds either.
* ``rebind(pyfunc)``: a kernel written against numba-cuda's names made compilable by numba-cuda-mlir (its
  ``cuda`` module, device functions and dtype constants swapped for numba-cuda-mlir's), so kernel modules
  keep ``from numba import cuda``.
* ``compile_kernel(pyfunc, argtypes, options, current_cc, prepass)`` and ``compile_ptx(pyfunc, argtypes, cc,
  prepass, **options)``: one specialisation through the selected compiler, with the NVVM pre-pass
  (``nvvm_prepass``) when ``prepass`` (numba-cuda-mlir's cubin is loaded by the launcher through the driver,
  numba-cuda's by numba).
* ``version()``: ``"<name>-<package version>"``, part of the compiled-kernel cache key.

sm_90a: numba-cuda targets the arch-specific ``sm_90a`` of an sm_90 device, numba-cuda-mlir plain
``sm_90`` (``tools.format_arch``: ``f"sm_{cc[0]}{cc[1]}"``), which ptxas refuses for ``wgmma`` /
``setmaxnreg``. Its ``cuda.jit(chip="sm_90a")`` option is the supported override: ``_verify_chip``
only asks for the ``sm_`` prefix, ``tools.resolve_gpu_target`` keeps the ``a`` suffix
(``arch_specific_cc``) for the linker, ``tools.parse_compute_capability`` accepts it. ``jit_options``
passes ``chip`` for a device of compute capability 9.0 (``SM90A_CHIP``). Checked without a GPU:
``wgmma.fence.sync.aligned`` through ``inline_ptx`` assembles to a cubin with ``chip="sm_90a"`` and is
rejected by ptxas with ``cc=(9, 0)``.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Sequence

from . import dataflow_fix, lowering_fix, mlir_fix, mlir_layout, nvvm_prepass, typing_memo
from .config import ENV_BACKEND

BACKENDS = ("numba", "mlir")
#: the first numpy release numba-cuda 0.30 cannot compile kernels with
NUMBA_NUMPY_LIMIT = (2, 5)
SM90A_CHIP = "sm_90a"
_PACKAGES = {"numba": "numba-cuda", "mlir": "numba-cuda-mlir"}


def numba_can_compile(numpy_version: str | None = None) -> bool:
    """Whether numba-cuda 0.30 compiles GPU kernels under this numpy (``numpy_version``, else the installed
    one): only below ``NUMBA_NUMPY_LIMIT``."""
    import numpy as np

    text = numpy_version or np.__version__
    v = tuple(int(x) for x in text.split(".")[:2] if x.isdigit())
    return v < NUMBA_NUMPY_LIMIT


def default_backend(numpy_version: str | None = None, have_mlir: bool | None = None) -> str:
    """The backend an unset ``NUMBA_NBITS_BACKEND`` selects: ``numba`` where numba-cuda can compile (its kernels
    are as fast or faster, see the module docstring), else ``mlir`` when numba-cuda-mlir is installed
    (``have_mlir``: whether it is; looked up without importing it), else ``numba`` (whose first compile then
    says what to install)."""
    if numba_can_compile(numpy_version):
        return "numba"
    if have_mlir is None:
        from importlib.util import find_spec

        have_mlir = find_spec("numba_cuda_mlir") is not None
    return "mlir" if have_mlir else "numba"


def parse_backend(text: str | None) -> str:
    """The backend named by ``text`` (the value of ``NUMBA_NBITS_BACKEND``); empty or None: ``default_backend()``."""
    value = (text or "").strip().lower()
    if not value:
        return default_backend()
    if value not in BACKENDS:
        raise ValueError(f'{ENV_BACKEND} must be one of {", ".join(BACKENDS)}; got "{text}"')
    return value


NAME = parse_backend(os.environ.get(ENV_BACKEND))


def simulated() -> bool:
    """True on numba-cuda's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, fixed once numba is imported)."""
    from numba.cuda.core import config

    return bool(config.ENABLE_CUDASIM)


def compiler() -> str:
    """The compiler that builds this process's kernels: ``NAME``, except ``"numba"`` on the simulator."""
    return "numba" if simulated() else NAME


def cuda():
    """The selected compiler's ``cuda`` module."""
    if compiler() == "mlir":
        from numba_cuda_mlir import cuda as mod
    else:
        from numba import cuda as mod
    return mod


def types():
    """The selected compiler's types module."""
    if compiler() == "mlir":
        from numba_cuda_mlir import types as mod
    else:
        from numba.cuda import types as mod
    return mod


def version() -> str:
    """``"<backend>-<version of its package>"`` (the compiled-kernel cache keys on it)."""
    from importlib.metadata import PackageNotFoundError, version as _version

    name = compiler()
    try:
        v = _version(_PACKAGES[name])
    except PackageNotFoundError:  # pragma: no cover - an uninstalled source checkout
        v = "unknown"
    return f"{name}-{v}"


def jit_options(options: dict[str, Any], cc: tuple[int, int] | None = None) -> dict[str, Any]:
    """``cuda.jit`` keywords (numba-cuda spelling) for the selected compiler; on numba-cuda-mlir and a
    compute capability 9.0 device, ``chip="sm_90a"`` (see the module docstring)."""
    if compiler() != "mlir":
        return dict(options)
    out = dict(options)
    if out.pop("forceinline", False):
        out["inline"] = "always"
    if cc is not None and tuple(cc) == (9, 0) and "chip" not in out:
        out["chip"] = SM90A_CHIP
    return out


def argtypes(ts: Sequence[Any]) -> tuple:
    """numba-cuda argument types as the selected compiler's (dtype name, ndim and layout kept)."""
    if compiler() != "mlir":
        return tuple(ts)
    from numba.cuda import types as nct

    mt = types()
    out = []
    for t in ts:
        if isinstance(t, nct.Array):
            out.append(mt.Array(getattr(mt, t.dtype.name), t.ndim, t.layout))
        else:
            out.append(getattr(mt, t.name))
    return tuple(out)


def array_slots(ndim: int) -> int:
    """Kernel parameters (8 bytes each) one ``ndim``-D array argument takes under the selected compiler."""
    return (3 if compiler() == "mlir" else 5) + 2 * ndim


def array_ptr_slot() -> int:
    """Index, within an array argument's parameters, of its data pointer."""
    return 1 if compiler() == "mlir" else 4


def array_params(ptr: int, shape: tuple, strides: tuple, itemsize: int) -> tuple:
    """The parameter values of one array argument: at ``ptr``, ``shape``, byte ``strides``."""
    if compiler() == "mlir":
        return (ptr, ptr, 0, *shape, *(s // itemsize for s in strides))
    n = 1
    for d in shape:
        n *= d
    return (0, 0, n, itemsize, ptr, *shape, *strides)


_REBOUND: dict = {}  # id(numba-cuda object) -> (the object, its numba-cuda-mlir counterpart)


def rebind(pyfunc):
    """``pyfunc`` for the selected compiler. On numba-cuda-mlir: a copy whose globals and closure cells
    that name numba-cuda's ``cuda`` module or a numba-cuda scalar type name numba-cuda-mlir's, and whose
    numba-cuda device functions (``@cuda.jit(device=True)``) are recompiled by numba-cuda-mlir from their
    Python source, recursively (numba-cuda-mlir types ``cuda.*`` only on its own module and calls only its
    own dispatchers). So kernel source is written once, against numba-cuda's names."""
    if compiler() != "mlir":
        return pyfunc
    return _rebound(pyfunc)


def _rebound_value(v):
    from numba import cuda as nc
    from numba.cuda import types as nct
    from numba.cuda.dispatcher import CUDADispatcher

    if v is nc:
        return cuda()
    if isinstance(v, nct.Number):  # a dtype constant (``cuda.shared.array(n, F32T)``)
        return getattr(types(), v.name)
    if isinstance(v, CUDADispatcher) and v.targetoptions.get("device"):
        hit = _REBOUND.get(id(v))
        if hit is None:
            hit = _REBOUND[id(v)] = (v, cuda().jit(device=True)(_rebound(v.py_func)))
        return hit[1]
    return v


def _rebound(pyfunc):
    import types as pytypes

    code = pyfunc.__code__
    g = dict(pyfunc.__globals__)
    for name in code.co_names:
        if name in g:
            g[name] = _rebound_value(g[name])
    cells = None
    if pyfunc.__closure__:
        cells = tuple(pytypes.CellType(_rebound_value(c.cell_contents)) for c in pyfunc.__closure__)
    fn = pytypes.FunctionType(code, g, pyfunc.__name__, pyfunc.__defaults__, cells)
    fn.__kwdefaults__ = pyfunc.__kwdefaults__
    fn.__qualname__ = pyfunc.__qualname__
    return fn


def compile_ptx(pyfunc, argtypes_: Sequence[Any], cc: tuple[int, int], prepass: bool = False, **options) -> str:
    """PTX of kernel ``pyfunc`` for ``argtypes_`` (numba-cuda types) at compute capability ``cc`` (``prepass``: with
    the NVVM pre-pass, ``nvvm_prepass``). On numba-cuda-mlir at 9.0 the PTX of a full compile for ``chip="sm_90a"``
    (its ``compile_ptx`` takes no ``chip`` and targets plain sm_90, which refuses ``wgmma``)."""
    c = cuda()
    sig = types().void(*argtypes(argtypes_))
    opts = jit_options(options, tuple(cc))
    if "chip" in opts:
        with _frontend(prepass):
            return c.jit(sig, **opts)(rebind(pyfunc)).compile(sig).metadata["ptx"]
    if simulated():
        ptx, _ = c.compile_ptx(rebind(pyfunc), sig, cc=tuple(cc), **options)
        return ptx
    with _frontend(prepass):
        ptx, _ = c.compile_ptx(rebind(pyfunc), sig, cc=tuple(cc), **options)
    return ptx


def prepass_state(prepass: bool) -> str:
    """What a compile asked for the NVVM pre-pass gets under this process's compiler: ``"off"`` (not asked),
    ``"installed"``, or why it compiles without it (``nvvm_prepass.install``); part of the kernel cache key."""
    return nvvm_prepass.install(compiler()) if prepass and not simulated() else "off"


@contextmanager
def _frontend(prepass: bool = False):
    """Around one compile of our kernels by the selected compiler: numba-cuda's front end with ``lowering_fix``,
    ``typing_memo`` and ``dataflow_fix``; numba-cuda-mlir's with ``mlir_fix``, ``typing_memo`` and ``mlir_layout`` (each
    installed only over the compiler version it was written against); with ``prepass`` the NVVM pre-pass where it is
    installed (``nvvm_prepass``)."""
    on = prepass_state(prepass) == "installed"
    if compiler() == "mlir":
        mlir_fix.install()
        typing_memo.install_mlir()
        mlir_layout.install()
        with mlir_layout.active(), typing_memo.active(), mlir_fix.active(), nvvm_prepass.active(on):
            yield
        return
    lowering_fix.install()
    typing_memo.install()
    dataflow_fix.install()
    with typing_memo.active(), dataflow_fix.active(), nvvm_prepass.active(on):
        yield


def compile_kernel(pyfunc, argtypes_: Sequence[Any], options: dict[str, Any], current_cc,
                   prepass: bool = False):
    """Compile kernel ``pyfunc`` for ``argtypes_`` (numba-cuda types) with ``options`` (``prepass``: and the NVVM
    pre-pass, ``nvvm_prepass``) for the current device: ``(dispatcher, loaded numba Function, None)`` on
    numba-cuda (the cubin stays in numba's code library; numba asks the device itself), ``(dispatcher, None,
    (entry name, cubin))`` on numba-cuda-mlir (for the compute capability ``current_cc()`` returns; loaded by the
    launcher)."""
    c = cuda()
    sig = types().void(*argtypes(argtypes_))
    if compiler() == "mlir":
        with _frontend(prepass):  # a signature given: numba-cuda-mlir compiles in jit(), compile() returns that result
            disp = c.jit(sig, **jit_options(options, current_cc()))(rebind(pyfunc))
            cres = disp.compile(sig)
        return disp, None, (cres.metadata["func_name"], bytes(cres.metadata["cubin"]))
    check_numba_numpy()
    with _frontend(prepass):  # the signature given: numba-cuda compiles here
        disp = c.jit(sig, **options)(pyfunc)
        return disp, next(iter(disp.overloads.values()))._codelibrary.get_cufunc(), None


def check_numba_numpy(numpy_version: str | None = None) -> None:
    """Refuse, with what to do, to compile on numba-cuda under a numpy it cannot compile with (numba-cuda
    0.30 fails inside its typing there); numba-cuda-mlir and the simulator are not affected."""
    import numpy as np

    text = numpy_version or np.__version__
    if not numba_can_compile(text):
        raise RuntimeError(
            f"numba-cuda cannot compile GPU kernels with numpy {text} (needs numpy < "
            f"{'.'.join(map(str, NUMBA_NUMPY_LIMIT))}): install numba-cuda-mlir (pip install "
            f"\"numba_nbits[mlir]\") and set {ENV_BACKEND}=mlir, or install \"numpy<2.5\"")
