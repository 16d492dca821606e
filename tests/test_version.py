"""`fleetgate --version` and `fleetgate version` print the package's version, and
`/admin/status` says it."""

from __future__ import annotations

from fleetgate import __version__
from tests.admin.helpers import admin, options
from tests.harness import Stack, deployment, provider
from tests.test_config import run_cli


def test_the_version_is_printed_and_in_the_status(stack: Stack, sqlite_url: str) -> None:
    for args in (("--version",), ("version",)):
        result = run_cli(*args)
        assert result.returncode == 0
        assert result.stdout.strip() == f"fleetgate {__version__}"
    engine = stack.engine("a")
    stack.start_gateway(
        {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]},
        options(sqlite_url),
    )
    assert admin(stack).get("/admin/status").json()["version"] == __version__
