"""Register caps and occupancy snapping (``launch/occupancy.py``, ``launch.Kernel(snap=...)``): the arithmetic
against hand-computed figures, the GEMV's register options, and the snapping decision of the launcher with a
stand-in compiler and driver (no GPU needed); on a GPU, what snapping did to real GEMV kernels."""
from __future__ import annotations

import re

import pytest
from conftest import requires_gpu

from numba_nbits import backend, launch
from numba_nbits.launch import driver as launch_driver
from numba_nbits.launch import kernel as launch_kernel
from numba_nbits.launch.occupancy import blocks_by_registers, register_cap, snap_target


def test_blocks_by_registers_allocates_per_warp_in_units_of_256():
    # 256 threads = 8 warps; 64 registers: 2048 per warp, 16384 per block -> 4 blocks
    assert blocks_by_registers(64, 256) == 4
    assert blocks_by_registers(65, 256) == 3  # 65 * 32 = 2080 -> 2304 per warp: 18432 per block
    assert blocks_by_registers(57, 128) == 8  # 57 * 32 = 1824 -> 2048 per warp
    assert blocks_by_registers(255, 32) == 8  # 8160 -> 8192 per warp
    assert blocks_by_registers(1, 33) == 128  # two warps of 256
    with pytest.raises(ValueError, match="registers per thread and threads per block"):
        blocks_by_registers(0, 256)


def test_register_cap_is_the_most_registers_that_fit_the_blocks():
    assert register_cap(256, 4) == 64
    assert register_cap(128, 8) == 64
    assert register_cap(256, 3) == 80  # 65536 / 24 warps = 2730 -> 2560 per warp
    assert register_cap(256, 2) == 128
    assert register_cap(32, 1) == 255  # 2048 per warp would allow 2048 per thread; the ISA allows 255
    for threads, blocks in ((256, 4), (128, 5), (96, 7), (512, 2), (64, 11)):
        cap = register_cap(threads, blocks)
        assert blocks_by_registers(cap, threads) >= blocks and blocks_by_registers(cap + 8, threads) < blocks
    with pytest.raises(ValueError, match="cannot fit"):
        register_cap(1024, 64)


def test_snap_target_is_one_step_down_within_the_slack():
    assert snap_target(65, 256, 2) == 64  # 3 -> 4 blocks of 8 warps
    assert snap_target(66, 256, 2) == 64
    assert snap_target(67, 256, 2) is None  # three over the step
    assert snap_target(64, 256, 2) is None  # on the step: the next (5 blocks) needs 48
    assert snap_target(50, 256, 2) == 48
    assert snap_target(58, 128, 2) == 56  # 8 -> 9 blocks of 4 warps
    assert snap_target(99, 128, 4) == 96
    assert snap_target(24, 1024, 8) == 16  # 2 -> 4 blocks of 32 warps: the register file alone


def test_gemv_register_options_launch_bounds_for_minb_and_snap_the_rest():
    from numba_nbits.kernels.gemv.mma import SNAP_SLACK, register_options
    from numba_nbits.kernels.gemv.tactics import Tactic

    assert register_options(Tactic.parse("t1w8u1p1b4")) == {"launch_bounds": (256, 4)}
    assert register_options(Tactic.parse("t1w4u1p1s3b8")) == {"launch_bounds": (128, 8)}
    assert register_options(Tactic.parse("t1w8u1p1b2")) == {"launch_bounds": (256, 2)}
    assert register_options(Tactic.parse("t1w8u2p1")) == {"snap": (256, SNAP_SLACK)}
    assert register_options(Tactic.parse("t2w4u1p1s4a")) == {"snap": (128, SNAP_SLACK)}


def test_kernel_refuses_a_bad_snap():
    with pytest.raises(ValueError, match="snap takes"):
        launch.Kernel(_kern, (), name="k", snap=(0, 2))
    with pytest.raises(ValueError, match="no max_registers"):
        launch.Kernel(_kern, (), name="k", snap=(256, 2), max_registers=64)


def test_the_cache_key_tells_snapped_kernels_apart(tmp_path):
    from numba.cuda import types

    from numba_nbits.launch import cache as kcache

    cache = kcache._KernelCache(str(tmp_path / "kc"))
    cache._toolchain = "test"
    args = (types.float32[::1],)
    keys = {cache.key(launch.Kernel(_kern, args, name="k", **o))
            for o in ({}, {"snap": (256, 2)}, {"snap": (256, 1)}, {"snap": (128, 2)})}
    assert len(keys) == 4


def _kern(x):  # the stand-in compiler never compiles it
    pass


class _Driver:
    """The driver calls of snapping, for cubins named ``cubin-<max_registers>``: registers, local bytes and
    resident blocks per build from ``builds``."""

    class CUfunction_attribute:  # noqa: N801 - cuda-bindings' names
        CU_FUNC_ATTRIBUTE_NUM_REGS = "regs"
        CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = "local"

    class CUresult:  # noqa: N801
        CUDA_ERROR_INVALID_HANDLE = 400

    def __init__(self, builds):
        self.builds, self.loaded, self.unloaded, self.occupancy_asked = builds, [], [], []

    def cuModuleLoadData(self, image):  # noqa: N802
        self.loaded.append(bytes(image))
        return 0, bytes(image).decode()

    def cuModuleGetFunction(self, module, name):  # noqa: N802
        return 0, module

    def cuModuleUnload(self, module):  # noqa: N802
        self.unloaded.append(module)
        return (0,)

    def cuFuncGetAttribute(self, attr, func):  # noqa: N802
        return 0, self.builds[func][attr]

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, func, threads, smem):  # noqa: N802
        self.occupancy_asked.append((func, threads, smem))
        return 0, self.builds[func]["blocks"]


def _snapping(monkeypatch, builds, **kernel_options):
    """A numba-cuda-mlir ``Kernel`` compiled through the stand-ins: (kernel, compiled max_registers, driver)."""
    from numba.cuda import types

    drv = _Driver(builds)
    compiled = []

    def compile_kernel(pyfunc, argtypes, options, current_cc, prepass=False):
        compiled.append(options.get("max_registers"))
        cap = options.get("max_registers")
        return f"disp-{cap}", None, ("_Z4kern", f"cubin-{cap}".encode())

    monkeypatch.setattr(backend, "compiler", lambda: "mlir")
    monkeypatch.setattr(backend, "compile_kernel", compile_kernel)
    monkeypatch.setattr(launch_driver, "_SIMULATED", False)
    monkeypatch.setattr(launch_kernel, "_current_cc", lambda: (9, 0))
    monkeypatch.setattr(launch_kernel, "_drv", lambda: drv)
    monkeypatch.setattr(launch_kernel, "_make_context_current", lambda: None)
    k = launch.Kernel(_kern, (types.float32[::1],), name="kern", **kernel_options)
    k.dispatcher()
    return k, compiled, drv


def _build(regs, local, blocks):
    return {"regs": regs, "local": local, "blocks": blocks}


def test_a_kernel_one_register_over_a_step_is_rebuilt_at_the_step(monkeypatch):
    k, compiled, drv = _snapping(monkeypatch, {"cubin-None": _build(65, 0, 3), "cubin-64": _build(64, 0, 4)},
                                 snap=(256, 2))
    assert compiled == [None, 64]
    assert k._disp == "disp-64" and k._image == ("_Z4kern", b"cubin-64") and k._func == "cubin-64"
    assert k.snapped == "65 -> 64 registers: 3 -> 4 blocks per SM"
    assert drv.unloaded == ["cubin-None", "cubin-64"]  # the query loads, then the kept build is loaded
    assert drv.loaded == [b"cubin-None", b"cubin-64", b"cubin-64"]
    assert drv.occupancy_asked == [("cubin-None", 256, 0), ("cubin-64", 256, 0)]


def test_a_capped_build_that_spills_or_gains_no_block_is_dropped(monkeypatch):
    k, compiled, _ = _snapping(monkeypatch, {"cubin-None": _build(66, 0, 3), "cubin-64": _build(64, 8, 4)},
                               snap=(256, 2))
    assert compiled == [None, 64] and k._disp == "disp-None" and k._func == "cubin-None"
    assert k.snapped == ("kept 66 registers (3 blocks per SM): at 64 the kernel had 4 blocks per SM and 8 bytes of "
                         "local memory against 0")
    k, compiled, _ = _snapping(monkeypatch, {"cubin-None": _build(65, 0, 2), "cubin-64": _build(64, 0, 2)},
                               snap=(256, 2))  # held to 2 blocks by something else (shared memory)
    assert compiled == [None, 64] and k._disp == "disp-None"


def test_no_second_build_off_a_step_or_without_snap(monkeypatch):
    k, compiled, drv = _snapping(monkeypatch, {"cubin-None": _build(64, 0, 4)}, snap=(256, 2))
    assert compiled == [None] and k._disp == "disp-None"
    assert k.snapped == "64 registers, 4 blocks per SM: no step within 2 registers"
    k, compiled, drv = _snapping(monkeypatch, {"cubin-None": _build(65, 0, 3)})
    assert compiled == [None] and k.snapped is None and drv.occupancy_asked == []
    k, compiled, drv = _snapping(monkeypatch, {"cubin-64": _build(64, 0, 4)}, max_registers=64)
    assert compiled == [64] and k.snapped is None


@requires_gpu
@pytest.mark.parametrize("tag, block, mt, dtype", [("t1w8u2p1", 32, 1, "float16"), ("t1w4u2p1", 32, 1, "float16"),
                                                   ("t1w8u2p1", 32, 1, "bfloat16"), ("t1w8u1p1", 128, 1, "float16"),
                                                   ("t1w8u1p1b4", 32, 2, "float16")])
def test_gemv_kernels_sit_on_an_occupancy_step_or_say_why_not(tag, block, mt, dtype):
    """Each compiler's real kernels: within the slack over a step only when snapping said why it kept them; a
    ``minb`` tactic within its cap."""
    from numba_nbits.kernels.gemv.mma import SNAP_SLACK, gemv_mma_kernel
    from numba_nbits.kernels.gemv.tactics import Tactic

    tac = Tactic.parse(tag)
    k = gemv_mma_kernel.__wrapped__(dtype, mt, tac, block, "none", 4)  # a new Kernel, not the process's
    k.dispatcher()  # compiles (and snaps) even when the kernel cache has the cubin
    regs = k.registers()
    if tac.minb:
        assert regs <= register_cap(32 * tac.warps, tac.minb) and k.snapped is None
        return
    assert k.snapped is not None
    if snap_target(regs, 32 * tac.warps, SNAP_SLACK) is not None:
        assert k.snapped.startswith(f"kept {regs} registers"), k.snapped
    else:
        pattern = rf"{regs} registers, \d+ blocks per SM: .*|\d+ -> {regs} registers: .*"
        assert re.fullmatch(pattern, k.snapped), k.snapped
