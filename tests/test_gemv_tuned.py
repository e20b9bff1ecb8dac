"""The tuned tactic tables of the tensor-core GEMV (``kernels/gemv/tuned/*.json``, ``gemv.tactics``).

``default_tactic`` serves every row of a table as written there (for each M of the row's M class), the
lookup for a GPU without a table falls back to the default GPU's, and the tables ship with the package.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from numba_nbits import backend
from numba_nbits.kernels.gemv import tactics as T
from numba_nbits.kernels.gemv import tuned_tables as TT

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent
TABLE = TT.TUNED_DIR / f"{TT.DEFAULT_GPU}-v{TT.KERNEL_VERSION}.json"
#: the M values of each M class (``tactics.m_class``) a row is checked with
CLASS_MS = {1: (1,), 8: (2, 5, 8), 16: (9, 16)}


def _rows_of(data):
    """``(bits, N, K, block_size, m_class, tactic)`` of every row of a tuned-table file's data."""
    return [(int(bits), *row) for bits, rows in data["tables"].items() for row in rows]


def _rows():
    data = json.loads(TABLE.read_text(encoding="utf-8"))
    assert data["gpu"] == TT.DEFAULT_GPU and data["kernel_version"] == TT.KERNEL_VERSION
    assert data["columns"] == ["N", "K", "block_size", "m_class", "tactic"]
    return _rows_of(data)


def test_table_has_every_bit_width():
    assert {r[0] for r in _rows()} == {2, 4, 8}
    assert len(_rows()) == 36 + 36 + 12


@pytest.mark.parametrize("bits,N,K,bs,mc,tag", _rows())
def test_default_tactic_serves_each_row(bits, N, K, bs, mc, tag):
    """Every row of the GPU's table is what numba-cuda's processes get; this process gets its compiler's table
    (a numba-cuda-mlir run: the rows of ``-mlir.json`` in place of the same keys)."""
    assert T.Tactic.parse(tag).tag == tag  # canonical spelling
    assert TT.tuned_table(bits, compiler="numba")[(N, K, bs, mc)] == tag
    want = TT.tuned_table(bits)[(N, K, bs, mc)]
    for M in CLASS_MS[mc]:
        assert T.m_class(M) == mc
        assert T.default_tactic(N, K, bs, M, bits) == T.Tactic.parse(want), (bits, N, K, bs, M)


@pytest.mark.parametrize("path", sorted(TT.TUNED_DIR.glob(f"*-v{TT.KERNEL_VERSION}-mlir.json")), ids=lambda p: p.name)
def test_a_numba_cuda_mlir_table_is_a_fit_of_known_keys(path, monkeypatch):
    """``<gpu>-v<version>-mlir.json`` (fitted under numba-cuda-mlir): same format, a GPU with a table of its own,
    canonical tags, keys of that GPU's table, a source under benchmarks/results/ that exists; that GPU's
    numba-cuda-mlir processes get its rows."""
    gpu = path.name.split("-v")[0]
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["gpu"] == gpu and data["kernel_version"] == TT.KERNEL_VERSION
    assert data["columns"] == ["N", "K", "block_size", "m_class", "tactic"]
    own = json.loads(TT.TUNED_DIR.joinpath(f"{gpu}-v{TT.KERNEL_VERSION}.json").read_text(encoding="utf-8"))
    base = {(b, *r[:4]) for b, *r in _rows_of(own)}
    for bits, N, K, bs, mc, tag in _rows_of(data):
        assert T.Tactic.parse(tag).tag == tag and (bits, N, K, bs, mc) in base
        assert TT.tuned_table(bits, gpu, compiler="mlir")[(N, K, bs, mc)] == tag
    for src in data["sources"].values():  # a key-by-key merge names each sweep (``gemv_tuned.merge_tuned``)
        for part in src.split(" + "):
            assert (ROOT / part / "sweep_gemv_m1.csv").is_file(), src
    import numba_nbits.backend as B

    monkeypatch.setattr(B, "compiler", lambda: "mlir")  # a process whose kernels numba-cuda-mlir builds
    for bits, N, K, bs, mc, tag in _rows_of(data):
        assert T.default_tactic(N, K, bs, CLASS_MS[mc][0], bits, gpu=gpu) == T.Tactic.parse(tag), (bits, N, K, bs, mc)


@pytest.mark.parametrize("args,tag", [
    ((28672, 8192, 128, 1, 4), "t1w8u1p1"),     # table rows
    ((8192, 28672, 32, 1, 4), "t1w8u2p1"),
    ((14336, 4096, 128, 8, 8), "t2w4u1p1"),
    ((4096, 4096, 64, 1, 2), "t1w8u2p1"),
    ((5120, 4096, 32, 1, 4), "t1w8u2p1"),       # nearest swept shape (4096 x 4096)
    ((100000, 4096, 64, 1, 4), "t1w4u1p1"),     # block 64 served by the block-128 rows
    ((32, 2880, 32, 1, 4), "t1w8u2"),           # far from every row: the rule
    ((4096, 4096, 32, 16, 2), "t1w8u2"),        # no 2-bit M 9..16 rows: the rule
    ((1024, 1024, 128, 4, 8), "t1w4u1"),        # 2x away in N and K: the rule
])
def test_default_tactic_hand_written(args, tag, monkeypatch):
    import numba_nbits.backend as B

    monkeypatch.setattr(B, "compiler", lambda: "numba")  # numba-cuda's table (a numba-cuda-mlir run has its own rows)
    assert T.default_tactic(*args).tag == tag


def test_gpu_without_a_table_uses_the_default_gpu():
    assert not (TT.TUNED_DIR / f"no-such-gpu-v{TT.KERNEL_VERSION}.json").exists()
    for bits in (2, 4, 8):
        assert TT.tuned_table(bits, "no-such-gpu") == TT.tuned_table(bits, TT.DEFAULT_GPU) != {}
    assert TT.tuned_table(3) == {}


def test_kernel_version_without_a_table_takes_the_rules(monkeypatch):
    """A kernel version no table was fitted to has no tuned tactics (an older version's table is never used):
    every shape takes the rule, which is what the GPU without any table gets for a shape far from every row."""
    far = T.default_tactic(32, 2880, 32, 1, 4)  # no row within 2x: the rule
    monkeypatch.setattr(TT, "KERNEL_VERSION", TT.KERNEL_VERSION + 1000)
    TT._load_tables.cache_clear()
    try:
        assert not TABLE.with_name(f"{TT.DEFAULT_GPU}-v{TT.KERNEL_VERSION}.json").exists()
        assert all(TT.tuned_table(bits) == {} for bits in (2, 4, 8))
        assert T.default_tactic(32, 2880, 32, 1, 4) == far
        rows = _rows_of(json.loads(TABLE.read_text(encoding="utf-8")))
        assert any(T.default_tactic(N, K, bs, mc, bits) != T.Tactic.parse(tag) for bits, N, K, bs, mc, tag in rows)
    finally:
        monkeypatch.undo()
        TT._load_tables.cache_clear()


def test_tables_are_package_data():
    """``pip install`` ships every table: pyproject's package-data globs match each file under ``tuned/``."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = cfg["tool"]["setuptools"]["package-data"]["numba_nbits.kernels.gemv"]
    pkg = ROOT / "numba_nbits" / "kernels" / "gemv"
    files = sorted(p.relative_to(pkg) for p in (pkg / "tuned").iterdir())
    assert files and all(any(f.match(g) for g in globs) for f in files), (files, globs)


@pytest.fixture
def tuned_dir(tmp_path, monkeypatch):
    """An empty tuned-table directory in place of the package's (``write_table`` fills it), lookups uncached."""
    monkeypatch.setattr(TT, "TUNED_DIR", tmp_path)
    TT._load_tables.cache_clear()
    yield tmp_path
    TT._load_tables.cache_clear()


def write_table(directory, gpu: str, suffix: str = "", **rows) -> None:
    """``<gpu>-v<version><suffix>.json`` in ``directory``: rows per bit width given as ``b4=[...]``, ``b8=[...]``."""
    (directory / f"{gpu}-v{TT.KERNEL_VERSION}{suffix}.json").write_text(json.dumps(
        {"gpu": gpu, "kernel_version": TT.KERNEL_VERSION, "columns": ["N", "K", "block_size", "m_class", "tactic"],
         "sources": {}, "tables": {b[1:]: [list(r) for r in rs] for b, rs in rows.items()}}))


def test_a_compilers_table_replaces_the_rows_it_has(tuned_dir):
    """``<gpu>-v<version>-mlir.json``: its rows replace the same keys of the GPU's table for processes whose
    kernels numba-cuda-mlir builds; numba-cuda's processes, and other keys, keep the GPU's table."""
    write_table(tuned_dir, "g", b4=[(4096, 4096, 32, 1, "t1w8u2p1"), (4096, 4096, 128, 1, "t1w8u1p1")],
                b8=[(4096, 4096, 128, 1, "t1w4u1")])
    write_table(tuned_dir, "g", "-mlir", b4=[(4096, 4096, 128, 1, "t1w8u1p2"), (8192, 4096, 32, 16, "t2w4u1")], b8=[])
    assert TT.tuned_table(4, "g", "numba") == {(4096, 4096, 32, 1): "t1w8u2p1", (4096, 4096, 128, 1): "t1w8u1p1"}
    assert TT.tuned_table(4, "g", "mlir") == {(4096, 4096, 32, 1): "t1w8u2p1", (4096, 4096, 128, 1): "t1w8u1p2",
                                             (8192, 4096, 32, 16): "t2w4u1"}
    assert TT.tuned_table(8, "g", "mlir") == TT.tuned_table(8, "g", "numba") == {(4096, 4096, 128, 1): "t1w4u1"}
    # with no compiler named, this process's (numba-cuda's on the simulator, NUMBA_NBITS_BACKEND's on a GPU)
    assert TT.tuned_table(4, "g") == TT.tuned_table(4, "g", backend.compiler())


@pytest.mark.parametrize("name,key", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), (b"NVIDIA H100 PCIe", "h100"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA L40S", "l40s"), ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA GeForce RTX 4090", "nvidia-geforce-rtx-4090"),
])
def test_gpu_key_of_device_names(name, key):
    assert TT.gpu_key(name) == key


def test_a_gpus_table_replaces_the_bit_widths_it_has(tuned_dir):
    """Per bit width: the GPU's own rows where its file has that width (not merged with the default GPU's, so the
    nearest-shape lookup never mixes two GPUs' fits), the default GPU's elsewhere; a compiler's file applies to
    the widths of the GPU it was fitted on."""
    d = TT.DEFAULT_GPU
    write_table(tuned_dir, d, b4=[(4096, 4096, 32, 1, "t1w8u2p1"), (8192, 4096, 32, 1, "t1w4u1p1")],
                b8=[(4096, 4096, 128, 1, "t1w4u1")])
    write_table(tuned_dir, d, "-mlir", b4=[(4096, 4096, 32, 1, "t1w8u1p2")], b8=[(4096, 4096, 128, 1, "t1w8u1")])
    write_table(tuned_dir, "g2", b4=[(4096, 4096, 32, 1, "t1w4u2p1")])
    assert TT.tuned_table(4, "g2", "numba") == TT.tuned_table(4, "g2", "mlir") == {(4096, 4096, 32, 1): "t1w4u2p1"}
    assert TT.tuned_table(8, "g2", "numba") == {(4096, 4096, 128, 1): "t1w4u1"}
    assert TT.tuned_table(8, "g2", "mlir") == {(4096, 4096, 128, 1): "t1w8u1"}  # the default GPU's, its overlay
    assert TT.tuned_table(4, d, "mlir") == {(4096, 4096, 32, 1): "t1w8u1p2", (8192, 4096, 32, 1): "t1w4u1p1"}
    assert TT.tuned_table(4, "no-such-gpu", "numba") == TT.tuned_table(4, d, "numba")
    assert T.default_tactic(4096, 4096, 32, 1, 4, gpu="g2").tag == "t1w4u2p1"
    assert T.default_tactic(8192, 4096, 32, 1, 4, gpu="g2").tag == "t1w4u2p1"  # nearest row of g2's own fit
    assert T.default_tactic(8192, 4096, 32, 1, 4).tag == "t1w4u1p1"


def _other_tables():
    return sorted(p for p in TT.TUNED_DIR.glob(f"*-v{TT.KERNEL_VERSION}.json") if p.name != TABLE.name)


@pytest.mark.parametrize("path", _other_tables(), ids=lambda p: p.name)
def test_each_gpus_table_is_served_to_that_gpu(path, monkeypatch):
    """A GPU's own table (``<gpu>-v<version>.json`` beside the default GPU's): its file names it, its tags are
    canonical, its source exists, and numba-cuda's processes on that GPU get each of its rows."""
    import numba_nbits.backend as B

    monkeypatch.setattr(B, "compiler", lambda: "numba")
    data = json.loads(path.read_text(encoding="utf-8"))
    gpu = path.name.split("-v")[0]
    assert data["gpu"] == gpu != TT.DEFAULT_GPU and data["kernel_version"] == TT.KERNEL_VERSION
    assert data["columns"] == ["N", "K", "block_size", "m_class", "tactic"]
    assert set(data["sources"]) == set(data["tables"])
    for src in data["sources"].values():  # the sweep's CSV (``sweep_gemv_m1.csv``, ``_w8`` / ``_w2`` for 8 / 2 bits);
        for part in src.split(" + "):  # a key-by-key merge names each sweep (``gemv_tuned.merge_tuned``)
            assert list((ROOT / part).glob("sweep_gemv_m1*.csv")), src
    rows = _rows_of(data)
    assert rows
    for bits, N, K, bs, mc, tag in rows:
        assert T.Tactic.parse(tag).tag == tag
        for M in CLASS_MS[mc]:
            assert T.default_tactic(N, K, bs, M, bits, gpu=gpu) == T.Tactic.parse(tag), (gpu, bits, N, K, bs, M)

