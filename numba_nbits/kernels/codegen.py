"""Loading generated kernel source so that it can be read: in tracebacks, in a debugger, on disk.

The kernel families generate their fully unrolled kernels as Python source text and execute it into a
namespace. ``load_source`` does that under a stable pseudo file name (``<numba_nbits NAME>``) that it
registers with ``linecache``, so a traceback or ``inspect.getsource`` shows the generated lines, and,
when ``NUMBA_NBITS_DUMP_SOURCE`` names a directory, also writes the text to ``DIR/NAME.py`` for
reading or diffing (the variable is read at each load; it is a debugging aid, not a configuration).
"""
from __future__ import annotations

import linecache
import os

ENV_DUMP_SOURCE = "NUMBA_NBITS_DUMP_SOURCE"


def source_filename(name: str) -> str:
    """The pseudo file name generated source of kernel ``name`` is compiled under."""
    return f"<numba_nbits {name}>"


def dump_source(name: str, src: str, directory: str) -> str:
    """Write ``src`` to ``directory/name.py`` (creating the directory) and return the path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{name}.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(src)
    return path


def load_source(name: str, src: str, namespace: dict) -> dict:
    """Execute generated ``src`` into ``namespace`` (returned) as file ``source_filename(name)``.

    The text is registered with ``linecache`` first, so tracebacks through the generated function show
    its lines; with ``NUMBA_NBITS_DUMP_SOURCE=DIR`` it is written to ``DIR/name.py`` as well.
    """
    filename = source_filename(name)
    lines = src.splitlines(keepends=True)
    linecache.cache[filename] = (len(src), None, lines, filename)
    directory = os.environ.get(ENV_DUMP_SOURCE)
    if directory:
        dump_source(name, src, directory)
    exec(compile(src, filename, "exec"), namespace)
    return namespace
