"""``benchmarks/ptx_stats.py``: the main-loop count of a kernel's SASS (``--sass``; no GPU, no nvdisasm needed here:
the parser runs on a hand-written listing in ``nvdisasm -c`` format) and the PTX it reads from either compiler."""
from __future__ import annotations

import pytest

SASS = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R8, SR_TID.X ;
.L_x_3:
        /*0020*/                   LOP3.LUT R2, R3, 0xf000f, R4, 0xea, !PT ;
.L_x_4:
        /*0030*/                   HFMA2 R5, R2, R6.H0_H0, -1032, -1032 ;
        /*0040*/                   HMMA.16816.F32 R8, R4, R6, R8 ;
        /*0050*/               @!P0 LDG.E.128.CONSTANT R12, desc[UR4][R2.64] ;
        /*0060*/               @P1 BRA `(.L_x_4) ;
        /*0070*/                   IMAD.MOV.U32 R9, RZ, RZ, R10 ;
        /*0080*/                   @!UPT UIADD3 URZ, URZ, URZ, URZ ;
        /*0090*/              @!P2 BRA `(.L_x_3) ;
        /*00a0*/                   BRA `(.L_x_5);
.L_x_5:
        /*00b0*/                   EXIT ;
"""


def main_loop(sass):
    from benchmarks.ptx_stats import main_loop as f  # the repository's scripts, not an installed package

    return f(sass)


def test_main_loop_is_the_largest_backward_branch():
    got = main_loop(SASS)
    assert got["main_loop"] == 8  # .L_x_3 .. the branch back to it: 0x20 .. 0x90
    assert got["loop_ops"] == {"BRA": 2, "HFMA2": 1, "HMMA": 1, "IMAD": 1, "LDG": 1, "LOP3": 1, "UIADD3": 1}
    assert next(iter(got["loop_ops"])) == "BRA"  # most frequent first


def test_the_tensor_core_loop_wins_over_a_longer_one():
    """A GEMV's cross-warp reduction loop (no HMMA) can be longer than its K loop: the K loop is the main one."""
    reduction = "".join(f"        /*{0x100 + 16 * k:04x}*/                   FADD R{k}, R{k}, R20 ;\n" for k in range(12))
    sass = SASS.replace(".L_x_5:\n", ".L_x_5:\n.L_x_9:\n" + reduction
                        + "        /*0200*/               @P3 BRA `(.L_x_9) ;\n")
    got = main_loop(sass)
    assert got["main_loop"] == 8 and "FADD" not in got["loop_ops"]
    assert main_loop(sass.replace("HMMA.16816.F32", "FMUL"))["main_loop"] == 13  # no tensor op: the longest


def _loop(*instrs):
    """A one-block loop of ``instrs`` in ``nvdisasm -c`` format."""
    body = "".join(f"        /*{0x20 + 16 * k:04x}*/                   {x} ;\n" for k, x in enumerate(instrs))
    return f".L_x_1:\n{body}        /*{0x20 + 16 * len(instrs):04x}*/              @P0 BRA `(.L_x_1) ;\n"


LD_A = "LDG.E.128.CONSTANT R28, desc[UR4][R54.64]"
LD_B = "LDG.E.128.CONSTANT R32, desc[UR4][R54.64+0x40]"
MMA_A = "HMMA.16816.F32 R36, R40, R28, RZ"  # B operand R28..R29
MMA_B = "HMMA.16816.F32 R36, R44, R32, R36"  # B operand R32..R33


def test_late_loads_counts_a_load_issued_after_an_hmma_that_a_later_hmma_waits_for():
    """The 2026-12-03 pattern: the stage's second activation load after the first HMMA, consumed in the block."""
    assert main_loop(_loop(LD_A, LD_B, MMA_A, MMA_B))["late_loads"] == 0
    assert main_loop(_loop(LD_A, MMA_A, LD_B, MMA_B))["late_loads"] == 1
    assert main_loop(_loop(MMA_A, LD_A, LD_B, MMA_A, MMA_B))["late_loads"] == 2
    # a register of the load's vector other than the first (R31 of R28..R31, as an A operand R30..R33) counts
    assert main_loop(_loop(MMA_B, LD_A, "HMMA.16816.F32 R36, R30, R12, R36"))["late_loads"] == 1


def test_late_loads_ignores_prefetch_overwritten_and_other_blocks():
    # consumed by no HMMA of the block (a prefetch for the next iteration)
    assert main_loop(_loop(MMA_A, LD_B, "IADD3 R2, R2, 0x1, RZ"))["late_loads"] == 0
    # overwritten before the HMMA reads the register: not the load's value any more
    assert main_loop(_loop(MMA_A, LD_B, "MOV R32, R2", "MOV R33, R3", MMA_B))["late_loads"] == 0
    # a label between them: the HMMA before the load, or the one consuming it, is in another basic block
    assert main_loop(_loop(MMA_A, LD_B, MMA_B))["late_loads"] == 1
    for split in (LD_B, MMA_A):
        sass = _loop(MMA_A, LD_B, MMA_B).replace(f"{split} ;\n", f"{split} ;\n.L_x_2:\n")
        assert main_loop(sass)["late_loads"] == 0


def test_no_backward_branch_no_loop():
    assert main_loop(SASS.replace("`(.L_x_4)", "`(.L_x_5)").replace("`(.L_x_3)", "`(.L_x_5)")) == {}


@pytest.mark.parametrize("compiler", ["numba", "mlir"])
def test_ptx_of_a_gemv_from_either_compiler(compiler):
    """``NUMBA_NBITS_BACKEND`` picks the compiler whose PTX ptx_stats reads (no GPU needed), so the two can be
    compared kernel by kernel."""
    from conftest import run_compiler

    from numba_nbits import backend

    if compiler == "mlir":
        pytest.importorskip("numba_cuda_mlir")
    elif not backend.numba_can_compile():
        import numpy as np

        pytest.skip(f"numba-cuda does not compile under numpy {np.__version__}")
    code = ("from benchmarks import ptx_stats as p; from numba_nbits import backend; "
            "tac, ptx, _ = p.compile_ptx('t1w1u1', 32, 1, 'float16'); "
            "print(backend.compiler(), tac.tag, '.entry' in ptx, 'mma.sync.aligned.m16n8k16' in ptx)")
    r = run_compiler(compiler, "-c", code, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == [compiler, "t1w1u1", "True", "True"], r.stdout


def test_main_loop_listing_is_the_loop_main_loop_counts():
    from benchmarks.ptx_stats import main_loop_listing

    text = main_loop_listing(SASS)
    lines = text.splitlines()
    assert lines[0] == ".L_x_3:" and "BRA `(.L_x_3)" in lines[-1]  # label to the branch back, labels kept
    assert sum("/*" in x for x in lines) == main_loop(SASS)["main_loop"] == 8
    assert main_loop_listing(SASS.replace("`(.L_x_4)", "`(.L_x_5)").replace("`(.L_x_3)", "`(.L_x_5)")) == ""


def _dump(tmp_path, *flags):
    """``python -m benchmarks.ptx_stats FLAGS --dump tmp_path t1w4u1,32,1`` under numba-cuda (its PTX, no GPU): the
    printed figures as a dict, and the files' path stem."""
    from conftest import run_compiler

    from benchmarks import ptx_stats
    from numba_nbits import backend

    if ptx_stats._ptxas() is None:
        pytest.skip("needs ptxas")
    if not backend.numba_can_compile():
        import numpy as np

        pytest.skip(f"numba-cuda does not compile under numpy {np.__version__}")
    r = run_compiler("numba", "-m", "benchmarks.ptx_stats", *flags, "--dump", str(tmp_path), "t1w4u1,32,1", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("tag=t1w4u1 "))
    fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv and not kv.startswith("loop_ops"))
    return fields, tmp_path / "t1w4u1_b32_mt1_float16_w4_numba"


def test_dump_writes_the_ptx_it_assembled(tmp_path):
    """``--dump DIR`` without ``--sass``: the PTX ptxas assembled for the figures printed (sm_90a), nothing else."""
    fields, stem = _dump(tmp_path)
    assert int(fields["regs"]) > 0 and "main_loop" not in fields
    ptx = stem.with_name(stem.name + ".ptx").read_text()
    assert ".entry" in ptx and ".target sm_90a" in ptx and "mma.sync.aligned.m16n8k16" in ptx
    assert [p.name for p in tmp_path.iterdir()] == [stem.name + ".ptx"]


def test_dump_writes_the_sass_it_counted(tmp_path):
    """``--sass --dump DIR``: also the cubin's SASS and its main loop, the loop ``main_loop`` counted."""
    from benchmarks import ptx_stats

    if ptx_stats._nvdisasm() is None:
        pytest.skip("needs nvdisasm (pip install nvidia-cuda-nvdisasm)")
    fields, stem = _dump(tmp_path, "--sass")
    sass, loop = (stem.with_name(stem.name + ext).read_text() for ext in (".sass", ".loop.sass"))
    assert ptx_stats.main_loop(sass)["main_loop"] == int(fields["main_loop"])
    assert loop == ptx_stats.main_loop_listing(sass) and "HMMA" in loop
    assert sorted(p.name for p in tmp_path.iterdir()) == [stem.name + ext for ext in (".loop.sass", ".ptx", ".sass")]
