"""The `fleetgate` command's entry point (`fleetgate …` and `python -m fleetgate …`).

The cyclic garbage collector is off while the command imports and starts. Start-up creates
a few hundred thousand objects that live as long as the process (modules, the config and
store models, the fleet), so every young collection on the way finds nothing to free: 3 %
of the instructions from exec to a ready `fleetgate serve`, measured with callgrind. Each
command turns the collector back on before its work (`cli.main`); `serve` does so once the
start-up objects are frozen out of its view (`gc_tuning.tune_gc`).
"""

import gc

gc.disable()

from fleetgate.cli import main  # noqa: E402  (after the collector is off)

__all__ = ["main"]
