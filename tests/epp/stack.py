"""Fake engines, a gateway whose pipeline the picker runs, the picker's gRPC server, and the
real Envoy in front, started with `fleetgate envoy-config`'s output."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from fleetgate.cli import main as fleetgate
from fleetgate.control.plane import ControlOptions
from fleetgate.epp.protocol import BODY_MODES
from fleetgate.epp.run import PickerServer
from tests.epp.envoy import Envoy, free_port
from tests.harness import Stack


class EppStack:
    def __init__(self, stack: Stack, workdir: Path) -> None:
        self.stack = stack
        self.workdir = workdir
        self.picker: PickerServer | None = None
        self.envoy: Envoy | None = None
        self.bootstrap = ""

    def start(
        self,
        config: dict[str, Any],
        body_mode: str = BODY_MODES[0],
        options: ControlOptions | None = None,
        edit: Callable[[dict[str, Any]], None] | None = None,
        endpoints: int | None = None,
    ) -> Envoy:
        """`edit` changes the printed bootstrap before Envoy reads it (a test's own filter);
        `endpoints` is the picker's `--endpoints`."""
        gateway = self.stack.start_gateway(config, options)
        self.picker = PickerServer(gateway.pipeline, "127.0.0.1", 0, max_endpoints=endpoints)
        epp_port = self.stack.lt.run(self.picker.start())
        listen, admin = free_port(), free_port()
        path = self.workdir / "fleet.yaml"
        path.write_text(yaml.safe_dump(config))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = fleetgate(
                [
                    "envoy-config",
                    "--config",
                    str(path),
                    "--epp",
                    f"127.0.0.1:{epp_port}",
                    "--listen",
                    f"127.0.0.1:{listen}",
                    "--http",
                    self.stack.url.removeprefix("http://"),
                    "--admin",
                    f"127.0.0.1:{admin}",
                    "--body-mode",
                    body_mode,
                ]
            )
        assert code == 0
        self.bootstrap = out.getvalue()
        if edit is not None:
            doc = yaml.safe_load(self.bootstrap)
            edit(doc)
            self.bootstrap = yaml.safe_dump(doc, sort_keys=False)
        self.envoy = Envoy(self.bootstrap, admin, listen, self.workdir).start()
        return self.envoy

    def stop_picker(self) -> None:
        if self.picker is not None:
            self.stack.lt.run(self.picker.stop(0))
            self.picker = None

    def close(self) -> None:
        if self.envoy is not None:
            self.envoy.stop()
        self.stop_picker()
