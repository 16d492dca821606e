"""Building the admin API prints no warning, whatever other threads do meanwhile."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.test_serve import ROOT

# Another thread keeps entering and leaving `warnings.catch_warnings()`, as pydantic does
# while it builds a model (the config tree, say) in a DB thread; the admin routers are built
# meanwhile, three times, with every warning shown (`PYTHONWARNINGS=always`). The config was
# loaded first, as in every process that serves the admin API.
_RACE = textwrap.dedent(
    """
    import sys, threading, time, warnings
    import fleetgate.config
    sys.setswitchinterval(1e-6)
    done = threading.Event()
    def other_thread():
        while not done.is_set():
            with warnings.catch_warnings():
                time.sleep(0.0003)
    t = threading.Thread(target=other_thread)
    t.start()
    from fleetgate.admin import entities, explain, fleet_view, history, keys, log, stats
    try:
        for _ in range(3):
            for module in (fleet_view, log, stats, explain, history, keys, entities):
                module.router(None)
    finally:
        done.set()
        t.join()
    print("built")
    """
)


def test_building_the_admin_api_warns_of_nothing_while_another_thread_catches_warnings():
    result = subprocess.run(
        [sys.executable, "-c", _RACE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PYTHONWARNINGS": "always"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "built"
    assert "Warning" not in result.stderr, result.stderr[:2000]
