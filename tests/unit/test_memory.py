"""memory.freeze_startup_heap: each case runs in a new interpreter, since the collector's
permanent generation is the process's own and pytest's would carry over from case to case."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "RAYLOG_FREEZE_GC"}
    environ.update(env, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_heap_alive_at_the_call_is_frozen_and_garbage_before_it_is_freed_not_frozen():
    out = run("""
        import gc, weakref
        from raylog import memory

        class Node:
            pass

        kept = [Node() for _ in range(1000)]
        dropped = Node()
        dropped.me = dropped  # a cycle: only the collector frees it
        gone = weakref.ref(dropped)
        del dropped
        assert memory.freeze_startup_heap()
        assert gone() is None, "garbage alive at the call was frozen"
        frozen = gc.get_freeze_count()
        assert frozen >= len(kept), frozen
        walked = {id(o) for o in gc.get_objects()}  # every generation a collection walks
        assert not any(id(n) in walked for n in kept)

        later = Node()
        later.me = later
        later_ref = weakref.ref(later)
        del later
        gc.collect()
        assert later_ref() is None, "a cycle made after the freeze was not collected"
        more = [Node() for _ in range(100)]
        assert memory.freeze_startup_heap()
        assert gc.get_freeze_count() == frozen, "a second call froze again"
        print("ok")
    """)
    assert out == "ok"


def test_raylog_freeze_gc_0_leaves_the_collector_alone():
    out = run("""
        import gc
        from raylog import memory
        print(memory.freeze_startup_heap(), gc.get_freeze_count())
    """, RAYLOG_FREEZE_GC="0")
    assert out == "False 0"


def test_a_program_that_turned_the_collector_off_is_left_alone():
    out = run("""
        import gc
        from raylog import memory
        gc.disable()
        print(memory.freeze_startup_heap(), gc.get_freeze_count(), gc.isenabled())
    """)
    assert out == "False 0 False"
