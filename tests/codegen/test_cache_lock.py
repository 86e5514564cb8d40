"""The compiled-library cache across processes: concurrent builds of the same library
(or of libraries sharing a source file) compile each entry once, the others wait and
reuse it; the lock of a killed process blocks nobody."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from plait.codegen.c.cache_lock import EntryLock

PROCESSES = 8
ROOT = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from plait.codegen.c.compiler import BuildOptions, compile_shared, compile_stats
    go, cache, which = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    while not go.exists():   # start together
        time.sleep(0.005)
    files = {"shared.c": "int plait_shared(int x) { return x + 1; }\\n"}
    if which >= 0:   # a library of its own that shares shared.c with the others
        files[f"own{which}.c"] = f"int plait_own(void) {{ return {which}; }}\\n"
    path = compile_shared(files, BuildOptions(threads=False), cache_dir=cache)
    print(json.dumps({"path": str(path), **compile_stats()}))
""")


@pytest.fixture()
def slow_cc(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose $CC logs each compilation and takes 0.5 s over it (so the
    processes overlap), and the log."""
    log = tmp_path / "cc.log"
    cc = tmp_path / "slowcc"
    real = os.environ.get("CC", "cc").split()[0]
    cc.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$*" in *--version*) exec {real} "$@";; esac
        echo "$*" >> {log}
        sleep 0.5
        exec {real} "$@"
    """))
    cc.chmod(0o755)
    env = dict(os.environ, CC=str(cc), PYTHONPATH=str(ROOT))
    return env, log


def _run_workers(tmp_path: Path, env: dict[str, str], which: list[int]) -> list[str]:
    go, cache = tmp_path / "go", tmp_path / "cache"
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(go), str(cache), str(w)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for w in which]
    time.sleep(0.5)  # let every process import plait and wait at the start line
    go.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        outs.append(out.strip().splitlines()[-1])
    return outs


def test_eight_processes_building_the_same_library_compile_it_once(tmp_path, slow_cc):
    env, log = slow_cc
    outs = _run_workers(tmp_path, env, [-1] * PROCESSES)
    assert len(log.read_text().splitlines()) == 1  # one compiler run for all eight
    assert len({o.split('"path": ')[1].split(",")[0] for o in outs}) == 1
    assert sum('"compiles": 1' in o for o in outs) == 1
    assert sum('"cache_hits": 1' in o for o in outs) == PROCESSES - 1


def test_a_source_shared_by_eight_libraries_is_compiled_once(tmp_path, slow_cc):
    env, log = slow_cc
    _run_workers(tmp_path, env, list(range(PROCESSES)))
    runs = log.read_text().splitlines()
    assert sum(" -c " in r and r.endswith("shared.c") for r in runs) == 1
    assert sum(" -c " in r and "own" in r for r in runs) == PROCESSES  # one each
    assert sum(" -c " not in r for r in runs) == PROCESSES  # one link each


def test_the_lock_of_a_killed_process_blocks_nobody(tmp_path):
    entry = tmp_path / "lib-x.so"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from plait.codegen.c.cache_lock import EntryLock
            lock = EntryLock({str(entry)!r})
            assert lock.try_acquire()
            print("held", flush=True)
            time.sleep(600)
        """)], env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    lock = EntryLock(entry, timeout=0.3)
    assert not lock.try_acquire()
    assert lock.holder() == holder.pid  # the lock file names its holder
    with pytest.warns(RuntimeWarning, match=f"held for more than 0 s \\(by process {holder.pid}"):
        assert not lock.acquire()  # a live holder past the timeout: not waited for
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    start = time.monotonic()
    with EntryLock(entry, timeout=5) as lock:  # the stale lock: gone with its process
        assert lock.held
    assert time.monotonic() - start < 1.0


HANGING = textwrap.dedent("""
    import sys
    from plait.codegen.c.compiler import BuildOptions, compile_shared
    compile_shared({"hang.c": "int plait_hang(void) { return 1; }\\n"},
                   BuildOptions(threads=False), cache_dir=sys.argv[1])
""")


def _hanging_cc(tmp_path: Path) -> dict[str, str]:
    """An environment whose $CC answers --version and then hangs on every compile."""
    cc = tmp_path / "hangcc"
    cc.write_text("#!/bin/sh\ncase \"$*\" in *--version*) echo hangcc 1.0; exit 0;; "
                  "*-dumpmachine*) cc -dumpmachine; exit 0;; esac\nexec sleep 600\n")
    cc.chmod(0o755)
    return dict(os.environ, CC=str(cc), PYTHONPATH=str(ROOT))


def test_a_compile_killed_with_sigkill_leaves_a_folder_the_next_compile_removes(tmp_path):
    """kill -9 during a compile leaves its build-* folder; a compile running meanwhile
    leaves a live one alone, and the first compile after the owner died removes it."""
    from plait.codegen.c.compiler import BuildOptions, compile_shared

    cache = tmp_path / "cache"
    child = subprocess.Popen([sys.executable, "-c", HANGING, str(cache)],
                             env=_hanging_cc(tmp_path), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not list((cache / "c").glob("build-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        folders = list((cache / "c").glob("build-*"))
        assert len(folders) == 1, "the hanging compile made no build folder"
        # another library compiled while the first compile runs: its folder stays
        compile_shared({"a.c": "int plait_a(void) { return 2; }\n"},
                       BuildOptions(threads=False), cache_dir=cache)
        assert folders[0].is_dir()
    finally:
        os.killpg(child.pid, signal.SIGKILL)   # the process and its compiler: kill -9
        child.wait()
    assert folders[0].is_dir()   # what a killed compile leaves
    compile_shared({"b.c": "int plait_b(void) { return 3; }\n"},
                   BuildOptions(threads=False), cache_dir=cache)
    assert not folders[0].exists()
    assert not list((cache / "c").glob("build-*"))


def test_the_thread_probe_takes_the_cache_lock(tmp_path, monkeypatch):
    """The probe of the compiler's thread support waits for the marker's lock like any
    compile; a waiter finds the marker the holder wrote and does not probe again."""
    import threading

    from plait.codegen.c import compiler

    d = tmp_path / "c"
    d.mkdir()
    cc = compiler.find_compiler()
    monkeypatch.setattr(compiler, "_THREADS", {})
    ident = compiler.hashlib.sha256(cc.ident.encode()).hexdigest()[:16]
    marker = d / f"threads-{ident}.txt"
    result: list[bool] = []
    probes = compiler.compile_stats()["thread_probes"]
    with EntryLock(marker):   # another process probing
        t = threading.Thread(target=lambda: result.append(compiler.threads_available(cc, d)))
        t.start()
        t.join(0.5)
        assert t.is_alive() and not result   # it waits for the lock
        marker.write_text("1")               # what the holder found
    t.join(30)
    assert result == [True]
    assert compiler.compile_stats()["thread_probes"] == probes   # no second probe
