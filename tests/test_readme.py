"""The README's generated sections (routes, env vars, performance) match the code and committed results."""
from pathlib import Path

from numba_nbits.readme import render

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_generated_sections_up_to_date():
    text = README.read_text()
    assert render(text) == text, "README.md is out of date: run `python -m numba_nbits.readme`"


def test_readme_has_setup_quickstart_and_demo():
    text = README.read_text()
    for needle in ("pip install -e", "python -m pytest", "python -m numba_nbits", "## Quick start", "## Routes",
                   "## Configuration", "## Performance"):
        assert needle in text


# ---------------------------------------------------------------- the README's Quick start and Demo run (issue 18)
# On numba's CUDA simulator the Quick start runs at the sizes its size line's comment names (the one line this
# test changes); on a GPU it runs verbatim. The Demo commands run as written.

import os  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from tests.conftest import SIMULATED  # noqa: E402

ROOT = README.parent
SIZE_LINE = re.compile(r"^(N, K, M = )[^#]*#\s*on numba's CUDA simulator:\s*(.+?)\s*$", re.M)


def _block(heading: str, lang: str) -> str:
    section = README.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    m = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert m, f"no ```{lang} block under ## {heading}"
    return m.group(1)


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["NUMBA_ENABLE_CUDASIM"] = "1" if SIMULATED else "0"
    return env


def quick_start_code(simulated: bool) -> str:
    code = _block("Quick start", "python")
    sizes = SIZE_LINE.findall(code)
    assert len(sizes) == 1, "the Quick start must set its sizes on one line: `N, K, M = ...  # on numba's CUDA " \
                            "simulator: n, k, m`"
    return SIZE_LINE.sub(lambda m: m.group(1) + m.group(2), code) if simulated else code


def test_quick_start_sizes_line_is_the_only_change():
    code, small = quick_start_code(False), quick_start_code(True)
    diff = [(a, b) for a, b in zip(code.splitlines(), small.splitlines()) if a != b]
    assert len(diff) == 1 and diff[0][1] == "N, K, M = 64, 128, 2"
    assert "4096" not in code.replace(diff[0][0], "")  # every size comes from that line


def test_readme_quick_start_runs():
    r = subprocess.run([sys.executable, "-c", quick_start_code(SIMULATED)], capture_output=True, text=True,
                       env=_env(), cwd=ROOT, timeout=900)
    assert r.returncode == 0, f"Quick start failed:\n{r.stdout}\n{r.stderr[-4000:]}"
    out = r.stdout.strip().splitlines()
    assert any("✔" in ln for ln in out), r.stdout  # the dispatch chain, chosen route ticked
    assert float(out[-1]) < 2e-3, r.stdout  # relative error vs the float64 oracle (fp16 tolerance)


def demo_commands() -> list[list[str]]:
    cmds = [shlex.split(ln, comments=True) for ln in _block("Demo", "bash").splitlines()]
    return [c for c in cmds if c]


def test_readme_demo_commands_run():
    cmds = demo_commands()
    assert [c[:3] for c in cmds] == [["python", "-m", "numba_nbits"], ["python", "-m", "numba_nbits.explain"]]
    for cmd in cmds:
        r = subprocess.run([sys.executable] + cmd[1:], capture_output=True, text=True, env=_env(), cwd=ROOT,
                           timeout=900)
        assert r.returncode == 0, f"{shlex.join(cmd)} failed:\n{r.stdout}\n{r.stderr[-4000:]}"
        assert "route: " in r.stdout, r.stdout
