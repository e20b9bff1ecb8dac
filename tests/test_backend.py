"""backend.py: ``NUMBA_NBITS_BACKEND`` selection and its errors, each backend's kernel ABI and ``cuda.jit``
options, the kernel-cache key's backend part, and -- where numba-cuda-mlir is importable -- every intrinsic
compiled by numba-cuda-mlir to PTX holding its instruction, and sm_90a through ``chip``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from numba_nbits import backend, launch
from numba_nbits import config as C
from numba_nbits.launch import cache as kcache
from numba_nbits.launch import kernel as launch_kernel

ROOT = Path(__file__).resolve().parent.parent


def test_default_backend_follows_what_numba_cuda_can_compile():
    """numba-cuda where it compiles (numpy < 2.5); numba-cuda-mlir under numpy 2.5 when it is installed."""
    assert backend.numba_can_compile("2.4.6") and backend.numba_can_compile("1.26.4")
    assert not backend.numba_can_compile("2.5.0") and not backend.numba_can_compile("3.0.1")
    assert backend.default_backend("2.4.6", have_mlir=True) == "numba"
    assert backend.default_backend("2.5.2", have_mlir=True) == "mlir"
    assert backend.default_backend("2.5.2", have_mlir=False) == "numba"
    with pytest.raises(RuntimeError, match="numba-cuda cannot compile GPU kernels with numpy 2.5.2"):
        backend.check_numba_numpy("2.5.2")
    backend.check_numba_numpy("2.4.6")


def test_parse_backend_default_choices_and_errors():
    assert backend.BACKENDS == ("numba", "mlir")
    assert backend.parse_backend(None) == backend.parse_backend("") == backend.parse_backend("  ") \
        == backend.default_backend()
    assert backend.parse_backend("numba") == "numba"
    assert backend.parse_backend(" MLIR ") == "mlir"
    for bad in ("llvm", "numba-cuda", "1"):
        with pytest.raises(ValueError, match=f'NUMBA_NBITS_BACKEND must be one of numba, mlir; got "{bad}"'):
            backend.parse_backend(bad)
    assert C.ENV_BACKEND == "NUMBA_NBITS_BACKEND"
    assert C.ENV_BACKEND in [r.name for r in C.PROCESS_ENV_TABLE]


def _import_backend(value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_NBITS_BACKEND=value, NUMBA_ENABLE_CUDASIM="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    code = "import numba_nbits.backend as b; print(b.NAME, b.compiler())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_backend_is_read_from_the_environment_at_import_and_the_simulator_is_numba_cuda():
    r = _import_backend("mlir")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["mlir", "numba"]  # asked for mlir; the simulator is numba-cuda's
    r = _import_backend("bogus")
    assert r.returncode != 0
    assert 'NUMBA_NBITS_BACKEND must be one of numba, mlir; got "bogus"' in r.stderr


@pytest.fixture
def as_backend(monkeypatch):
    def use(name):
        monkeypatch.setattr(backend, "compiler", lambda: name)

    return use


def test_array_abi_per_backend(as_backend):
    shape, strides = (3, 5), (40, 8)  # int64 elements, row pitch 5
    as_backend("numba")
    assert backend.array_slots(2) == 9 and backend.array_ptr_slot() == 4
    assert backend.array_params(0x1000, shape, strides, 8) == (0, 0, 15, 8, 0x1000, 3, 5, 40, 8)
    as_backend("mlir")
    assert backend.array_slots(2) == 7 and backend.array_ptr_slot() == 1
    assert backend.array_params(0x1000, shape, strides, 8) == (0x1000, 0x1000, 0, 3, 5, 5, 1)
    from numba.cuda import types

    layout, nslots = launch_kernel._layout_of((types.float32[:, ::1], types.int64, types.uint32[::1]))
    assert nslots == 7 + 1 + 5
    assert layout[0][:3] == (0, 7, "array") and layout[0][4] == 1
    assert layout[1][:3] == (7, 1, "scalar") and layout[1][4] is None
    assert layout[2][:3] == (8, 5, "array") and layout[2][4] == 9


def test_jit_options_per_backend(as_backend):
    opts = {"fastmath": False, "launch_bounds": (128, 2), "max_registers": 64, "lineinfo": True,
            "forceinline": True}
    as_backend("numba")
    assert backend.jit_options(opts, (9, 0)) == opts
    as_backend("mlir")
    mapped = backend.jit_options(opts, (9, 0))
    assert mapped == {"fastmath": False, "launch_bounds": (128, 2), "max_registers": 64, "lineinfo": True,
                      "inline": "always", "chip": "sm_90a"}
    assert "chip" not in backend.jit_options({}, (8, 0))
    assert backend.jit_options({"chip": "sm_90"}, (9, 0)) == {"chip": "sm_90"}


class _FakeDrv:
    @staticmethod
    def cuDriverGetVersion():
        return 0, 13000


class _FakeNVVM:
    @staticmethod
    def get_version():
        return (2, 0)


def _kern(out):
    out[0] = 1.0


def test_cache_key_differs_by_backend(monkeypatch, as_backend):
    from numba.cuda import types
    from numba.cuda.cudadrv import nvvm

    monkeypatch.setattr(nvvm, "NVVM", _FakeNVVM)  # the toolchain's parts that need a GPU (or NVVM)
    monkeypatch.setattr(kcache, "_drv", lambda: _FakeDrv())
    monkeypatch.setattr(kcache, "_current_cc", lambda: (9, 0))
    keys = {}
    for name in backend.BACKENDS:
        as_backend(name)
        cache = kcache._KernelCache("/nonexistent")
        assert cache.toolchain().startswith(f"backend={name}-")
        keys[name] = cache.key(launch.Kernel(_kern, (types.float32[::1],), name="k"))
    assert keys["numba"] != keys["mlir"]
    assert "backend.py" in kcache.KERNEL_SOURCES  # editing the backend layer changes every key


# ----------------------------------------------------------------------- numba-cuda-mlir, without a GPU

# intrinsic -> (its test kernel's argument dtypes (out, in), the instruction its PTX must hold)
_EXPECTED = {
    "u32_as_f32": ((np.float32, np.uint32), "mov.b32"),
    "f32_as_u32": ((np.uint32, np.float32), "mov.b32"),
    "bf16_to_f32": ((np.float32, np.uint16), "mov.b32"),
    "f32_to_bf16": ((np.uint16, np.float32), "cvt.rn.bf16.f32"),
    "f32_to_f16": ((np.uint16, np.float32), "cvt.rn.f16.f32"),
    "ldg_v4": ((np.uint32, np.uint32), "ld.global.nc.v4.u32"),
    "ldg_v2": ((np.uint32, np.uint32), "ld.global.nc.v2.u32"),
    "ldg_v4_at": ((np.uint32, np.float16), "ld.global.nc.v4.u32"),
    "st_v4": ((np.uint32, np.uint32), "st.global.v4.b32"),
    "st_v2": ((np.uint32, np.uint32), "st.global.v2.b32"),
    "ldcg": ((np.uint32, np.uint32), "ld.global.cg"),
    "prefetch_l2": ((np.uint32, np.uint32), "prefetch.global.L2"),
    "threadfence": ((np.uint32, np.uint32), "membar.gl"),
    "pack_f16x2": ((np.uint32, np.float32), "cvt.rn.f16x2.f32"),
    "pack_bf16x2": ((np.uint32, np.float32), "cvt.rn.bf16x2.f32"),
    "fma_f16x2": ((np.uint32, np.uint32), "fma.rn.f16x2"),
    "fma_bf16x2": ((np.uint32, np.uint32), "fma.rn.bf16x2"),
    "lop3_andor": ((np.uint32, np.uint32), "lop3.b32"),
    "f16lo_to_f32": ((np.float32, np.uint32), "cvt.f32.f16"),
    "f16hi_to_f32": ((np.float32, np.uint32), "cvt.f32.f16"),
    "opaque_i64": ((np.int64, np.int64), "mov.b64"),
    "mma_f16": ((np.float32, np.uint32), "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
    "mma_bf16": ((np.float32, np.uint32), "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
}


def _test_kernel(name, I):  # noqa: N803 - I: the intrinsics module
    """A one-thread kernel that calls intrinsic ``name`` (written against numba-cuda's ``cuda``, as the
    project's kernels are; ``backend.rebind`` points it at numba-cuda-mlir's)."""
    f = getattr(I, name)
    if name in ("ldg_v4",):
        def k(o, x):
            a, b, c, d = f(x, cuda.threadIdx.x)
            o[0] = a + b + c + d
    elif name == "ldg_v4_at":
        def k(o, x):
            a, b, c, d = f(x, cuda.threadIdx.x * 16)
            o[0] = a + b + c + d
    elif name == "ldg_v2":
        def k(o, x):
            a, b = f(x, cuda.threadIdx.x)
            o[0] = a + b
    elif name == "st_v4":
        def k(o, x):
            f(o, 4, x[0], x[1], x[2], x[3])
    elif name == "st_v2":
        def k(o, x):
            f(o, 2, x[0], x[1])
    elif name in ("ldcg",):
        def k(o, x):
            o[0] = f(x, 3)
    elif name == "prefetch_l2":
        def k(o, x):
            f(x, cuda.threadIdx.x)
    elif name == "threadfence":
        def k(o, x):
            o[0] = x[0]
            f()
    elif name in ("pack_f16x2", "pack_bf16x2"):
        def k(o, x):
            o[0] = f(x[0], x[1])
    elif name in ("fma_f16x2", "fma_bf16x2", "lop3_andor"):
        def k(o, x):
            o[0] = f(x[0], x[1], x[2])
    elif name.startswith("mma_"):
        def k(o, x):
            d = f(x[0], x[1], x[2], x[3], x[4], x[5], 0.0, 0.0, 0.0, 0.0)
            o[0] = d[0] + d[1] + d[2] + d[3]
    else:
        def k(o, x):
            o[0] = f(x[0])
    return k


@pytest.fixture
def mlir_offline():
    """numba-cuda-mlir able to compile here: skipped when it is not importable; without a GPU its private
    compute-capability cache is primed with 9.0 (it asks the device even when ``chip`` names the target)."""
    pytest.importorskip("numba_cuda_mlir")
    import numba_cuda_mlir.tools as tools

    primed = tools._cached_cc is None and not _has_gpu()
    if primed:
        tools._cached_cc = (9, 0)
    yield
    if primed:
        tools._cached_cc = None


def _has_gpu() -> bool:
    try:
        from cuda.bindings import driver

        return int(driver.cuInit(0)[0]) == 0
    except Exception:  # noqa: BLE001 - no driver library
        return False


def test_every_intrinsic_compiles_under_numba_cuda_mlir(mlir_offline, as_backend):
    from numba.cuda import types

    from numba_nbits.kernels import intrinsics, intrinsics_mlir

    assert set(_EXPECTED) == set(intrinsics.TWINS)  # every intrinsic is covered
    as_backend("mlir")
    for name, ((out_dt, in_dt), instr) in _EXPECTED.items():
        argtypes = (getattr(types, np.dtype(out_dt).name)[::1], getattr(types, np.dtype(in_dt).name)[::1])
        ptx = backend.compile_ptx(_test_kernel(name, intrinsics_mlir), argtypes, (9, 0))
        assert instr in ptx, name


def test_sm90a_through_chip_under_numba_cuda_mlir(mlir_offline):
    import importlib

    from numba_cuda_mlir import cuda as mcuda
    from numba_cuda_mlir import types as mt

    importlib.import_module("numba_cuda_mlir.cuda.experimental")

    def fence(out):
        mcuda.experimental.inline_ptx("wgmma.fence.sync.aligned;")
        out[0] = 1.0

    sig = mt.void(mt.float32[::1])
    cres = mcuda.jit(sig, chip=backend.SM90A_CHIP)(fence).compile(sig)
    assert ".target sm_90a" in cres.metadata["ptx"] and len(cres.metadata["cubin"]) > 0
    with pytest.raises(Exception, match="PTX"):  # plain sm_90 (cc=(9, 0)): ptxas refuses wgmma
        mcuda.jit(sig, cc=(9, 0))(fence).compile(sig)


_PROJECT_KERNELS = """
import numba_cuda_mlir.tools as tools
from cuda.bindings import driver
try:
    gpu = int(driver.cuInit(0)[0]) == 0
except Exception:
    gpu = False
if not gpu:
    tools._cached_cc = (9, 0)  # numba-cuda-mlir asks the device even when chip names the target
from numba_nbits import backend
from numba_nbits.kernels import bias, dequant, intrinsics
assert backend.compiler() == "mlir" and intrinsics.MLIR
kernels = [bias.bias_add_kernel("bfloat16"), dequant.dequant_kernel(4, "float16", "typed", True)]
kernels += [dequant.dequant_kernel(bits, "float16", "packed", False) for bits in (2, 4, 8)]
for k in kernels:
    ptx = backend.compile_ptx(k.pyfunc, k.argtypes, (9, 0))
    assert ".target sm_90" in ptx and ".entry" in ptx, k.name
    print(k.name, "st.global.v4.b32" in ptx)
# the launcher's path: a cubin and its entry name, launch bounds kept, sm_90a on a 9.0 device
k = kernels[0]
disp, cufunc, (entry, cubin) = backend.compile_kernel(k.pyfunc, k.argtypes, {"launch_bounds": (256, 2)},
                                                      lambda: (9, 0))
ptx = disp.compile(backend.types().void(*backend.argtypes(k.argtypes))).metadata["ptx"]
assert cufunc is None and cubin[:4] == b"\x7fELF" and f".entry {entry}(" in ptx
assert ".target sm_90a" in ptx and ".maxntid 256, 1, 1" in ptx and ".minnctapersm 2" in ptx
"""


def test_project_kernels_compile_under_numba_cuda_mlir():
    """Kernel source written against numba-cuda (its ``cuda`` module, ``@cuda.jit(device=True)`` helpers,
    numba-cuda dtype constants, the intrinsics) compiles unchanged under ``NUMBA_NBITS_BACKEND=mlir``
    outside the simulator (a process of its own: the backend is read once)."""
    pytest.importorskip("numba_cuda_mlir")
    env = dict(os.environ, NUMBA_NBITS_BACKEND="mlir", NUMBA_ENABLE_CUDASIM="0",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", _PROJECT_KERNELS], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.split("\n")
    assert len([ln for ln in lines if ln.strip()]) == 5
    assert any(ln.startswith("dequant_w4_float16_packed_fast") and ln.endswith("True") for ln in lines), r.stdout


def test_backend_compare_joins_the_workers_rows(tmp_path, capsys):
    """benchmarks/backend_compare.py's parent step on two workers' outputs (the workers need a GPU)."""
    import csv
    import json

    from benchmarks import backend_compare as bc

    base = dict(shape="s", N="64", K="128", M="1", bits="4", block="32", dtype="float16", zp="none",
                bias="False", variant="", kind="ours")
    for name, us, host in (("numba", "10.0", "5.0"), ("mlir", "10.1", "4.0")):
        d = tmp_path / f"perf-{name}"
        d.mkdir()
        with open(d / "results.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(base) + ["route", "us", "host_us", "correct"])
            w.writeheader()
            w.writerow(dict(base, route="gemv_w4", us=us, host_us=host, correct="True"))
            w.writerow(dict(base, kind="peer", route="torch", us="1", host_us="1", correct="True"))
        (tmp_path / f"worker-{name}.json").write_text(json.dumps(
            {"backend": name, "version": f"{name}-0", "perf_rc": 0, "compiles": [["k1", 1.5], ["k2", 0.5]],
             "launch_host_us": 2.0}))
    bc.compare(tmp_path, ["numba", "mlir"])
    rows = list(csv.DictReader(open(tmp_path / "routes.csv")))
    assert len(rows) == 1 and rows[0]["route"] == "gemv_w4"
    assert rows[0]["us_numba"] == "10.0" and rows[0]["us_mlir"] == "10.1" and rows[0]["us_ratio"] == "1.0100"
    assert len(list(csv.DictReader(open(tmp_path / "compile.csv")))) == 4
    assert [r["backend"] for r in csv.DictReader(open(tmp_path / "launch.csv"))] == ["numba", "mlir"]
    assert "mlir / numba over 1 case-routes: median 1.0100, worst 1.0100 (bar: <= 1.02)" in capsys.readouterr().out
    # the workers' order (``--backends mlir,numba``) changes the columns' order, not the ratio
    bc.compare(tmp_path, ["mlir", "numba"])
    rows = list(csv.DictReader(open(tmp_path / "routes.csv")))
    assert list(rows[0])[-7:] == ["us_mlir", "host_us_mlir", "correct_mlir", "us_numba", "host_us_numba",
                                  "correct_numba", "us_ratio"]
    assert rows[0]["us_ratio"] == "1.0100"
    assert "mlir / numba over 1 case-routes: median 1.0100, worst 1.0100" in capsys.readouterr().out


def test_backend_compare_passes_routes_to_the_perf_run(tmp_path):
    """``--routes`` reaches each worker's quick perf run as its own ``--routes``; without it the perf run keeps
    its default (every eligible route)."""
    from benchmarks import backend_compare as bc
    from numba_nbits.perf import cli

    args = bc.perf_args("mlir", tmp_path, 90.0, "auto")
    assert args[-2:] == ["--routes", "auto"] and str(tmp_path / "perf-mlir") in args
    assert cli.parse(args).routes == ["auto"]
    assert "--routes" not in bc.perf_args("numba", tmp_path, 90.0)


def test_backend_compare_paths_per_backend():
    """``--path NAME=DIRS``: extra PYTHONPATH entries for one backend's worker; a bad item is an error naming it."""
    from benchmarks import backend_compare as bc

    assert bc.parse_paths(["numba=/a:/b", "mlir=/c"], ["numba", "mlir"]) == {"numba": "/a:/b", "mlir": "/c"}
    assert bc.parse_paths([], ["numba", "mlir"]) == {}
    for bad in ("numba", "other=/x", "mlir="):
        with pytest.raises(SystemExit, match="--path takes NAME=DIRS"):
            bc.parse_paths([bad], ["numba", "mlir"])


# --------------------------------------------------------- the launcher on numba-cuda-mlir, with a stand-in GPU


class _FakeDriver:
    """The driver calls the launcher makes for a numba-cuda-mlir kernel, recorded."""

    def __init__(self):
        self.loaded, self.launches = [], []

    class CUfunction_attribute:  # noqa: N801 - cuda-bindings' name
        CU_FUNC_ATTRIBUTE_NUM_REGS = "regs"

    def cuModuleLoadData(self, image):  # noqa: N802
        self.loaded.append(bytes(image))
        return 0, f"module{len(self.loaded)}"

    def cuModuleGetFunction(self, module, name):  # noqa: N802
        return 0, (module, name)

    def cuFuncGetAttribute(self, attr, func):  # noqa: N802
        return 0, 40

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        self.launches.append((func, (gx, gy, gz), (bx, by, bz), params))
        return (0,)


class _Arr:  # the fields of a DevArray the launcher reads
    def __init__(self, ptr, shape, strides, dtype):
        self.ptr, self.shape, self.strides, self.dtype = ptr, shape, strides, np.dtype(dtype)


def test_launcher_compiles_caches_loads_and_packs_for_numba_cuda_mlir(tmp_path, monkeypatch, as_backend):
    from numba.cuda import types

    from numba_nbits.launch import driver as launch_driver

    drv = _FakeDriver()
    compiled = []

    def compile_kernel(pyfunc, argtypes, options, current_cc, prepass=False):
        compiled.append((pyfunc.__name__, current_cc(), prepass))
        return object(), None, ("_Z4kern", b"\x7fELF-cubin")

    as_backend("mlir")
    monkeypatch.setattr(backend, "compile_kernel", compile_kernel)
    monkeypatch.setattr(launch_driver, "_SIMULATED", False)
    monkeypatch.setattr(launch_kernel, "_current_cc", lambda: (9, 0))
    monkeypatch.setattr(launch_kernel, "_drv", lambda: drv)
    monkeypatch.setattr(launch_kernel, "_make_context_current", lambda: None)
    cache = kcache._KernelCache(str(tmp_path / "kc"))
    cache._toolchain = "backend=mlir-test"
    monkeypatch.setitem(kcache._CACHE_STATE, "cache", cache)
    argtypes = (types.float32[:, ::1], types.int64)

    k1 = launch.Kernel(_kern, argtypes, name="kern")
    k1.ensure()
    assert compiled == [("_kern", (9, 0), False)] and not k1.from_cache and cache.stores == 1
    assert drv.loaded == [b"\x7fELF-cubin"] and k1._func == ("module1", b"_Z4kern") and k1.registers() == 40
    k2 = launch.Kernel(_kern, argtypes, name="kern")
    k2.ensure()  # the cached cubin, loaded through the driver: no compile
    assert len(compiled) == 1 and k2.from_cache and drv.loaded == [b"\x7fELF-cubin"] * 2

    lau = k2.bind((2, 1), 128, (_Arr(0x1000, (4, 8), (32, 4), np.float32), 7))
    assert list(lau._template.vals) == [0x1000, 0x1000, 0, 4, 8, 8, 1, 7]  # memref descriptor, then the int64
    lau.set_array(0, _Arr(0x2000, (4, 8), (32, 4), np.float32))  # same layout: only the data pointer moves
    lau.launch(5)
    assert list(lau._bufs().vals) == [0x1000, 0x2000, 0, 4, 8, 8, 1, 7]
    assert drv.launches == [(("module2", b"_Z4kern"), (2, 1, 1), (128, 1, 1), lau._bufs().addr)]


def test_numba_cuda_refuses_a_numpy_it_cannot_compile_with():
    from numba_nbits import backend

    backend.check_numba_numpy("2.4.6")
    backend.check_numba_numpy("1.26.4")
    for v in ("2.5.0", "2.5.2", "3.0.0rc1"):
        with pytest.raises(RuntimeError, match=r"numba-cuda cannot compile GPU kernels with numpy "
                                               + v.replace(".", r"\.") + r".*NUMBA_NBITS_BACKEND=mlir"):
            backend.check_numba_numpy(v)
