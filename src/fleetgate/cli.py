"""The `fleetgate` command: serve, epp, envoy-config, demo, explain, check, diff, status, keys,
version."""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path
from typing import Any

from fleetgate import __version__
from fleetgate.config import ConfigError, check_config_text, load_config_file
from fleetgate.epp.protocol import BODY_MODES
from fleetgate.logs import LEVELS
from fleetgate.store.errors import StoreUnavailable


def _cmd_serve(args: argparse.Namespace) -> int:
    from fleetgate.assemble import serve

    serve(args.config, args.host, args.port, args.workers, args.log_level)
    return 0


def _cmd_epp(args: argparse.Namespace) -> int:
    from fleetgate.commands.epp import PickerArgs, run

    run(
        PickerArgs(
            args.config, args.host, args.port, args.http_host, args.http_port, args.endpoints
        )
    )
    return 0


def _cmd_envoy_config(args: argparse.Namespace) -> int:
    from fleetgate.epp.envoy_config import envoy_config_text

    try:
        text = envoy_config_text(
            load_config_file(args.config),
            args.epp,
            args.listen,
            http=args.http,
            admin=args.admin,
            body_mode=args.body_mode,
        )
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from fleetgate.demo import run_demo

    return run_demo(args.host, args.port)


def _cmd_check(args: argparse.Namespace) -> int:
    path = Path(args.config)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"{path}: cannot read: {exc.strerror}", file=sys.stderr)
        return 2
    problems = check_config_text(text, str(path))
    errors = [p for p in problems if p.severity == "error"]
    for p in problems:
        print(f"{path}:{p.line or '?'}: {p.severity}: {p.path}: {p.message}")
    if errors:
        print(f"{path}: {len(errors)} error(s)", file=sys.stderr)
        return 1
    from fleetgate.commands.keys import auth_key_warning
    from fleetgate.diagnose import describe_fleet

    config = load_config_file(path)
    warning = auth_key_warning(config)
    if warning is not None:
        print(f"{path}:{_line_of(text, 'auth') or '?'}: warning: auth.enabled: {warning}")
    print(describe_fleet(config))
    return 0


def _line_of(text: str, section: str) -> int | None:
    """The line a top-level section starts on."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith(f"{section}:"):
            return number
    return None


def _cmd_explain(args: argparse.Namespace) -> int:
    from fleetgate.errors import GatewayError
    from fleetgate.fleet import build_fleet
    from fleetgate.ingress.openai import parse_json_object
    from fleetgate.pipeline.explain import explain_request
    from fleetgate.state.runtime import MemoryState

    fleet = build_fleet(load_config_file(args.config))
    raw = sys.stdin.buffer.read() if args.request == "-" else Path(args.request).read_bytes()
    headers = {}
    for item in args.header or []:
        name, _, value = item.partition(":")
        headers[name.strip().lower()] = value.strip()
    try:
        result = explain_request(parse_json_object(raw), fleet, MemoryState(), headers)
    except GatewayError as exc:
        print(json.dumps(exc.body(), indent=2))
        return 1
    print(json.dumps(result, indent=2))
    return 0 if not result.get("error") else 1


def _cmd_diff(args: argparse.Namespace) -> int:
    from fleetgate.commands.diff import run

    try:
        return run(args.config)
    except (ConfigError, StoreUnavailable) as exc:  # 1 means "they differ", as for diff(1)
        print(str(exc), file=sys.stderr)
        return 2


def _cmd_keys(args: argparse.Namespace) -> int:
    from fleetgate.commands.keys import run

    return run(args)


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"fleetgate {__version__}")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from fleetgate.commands.status import run

    return run(args.url)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _amount(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def _keys_parser(sub: Any) -> None:
    p = sub.add_parser("keys", help="create, list, disable or delete client keys in the store")
    config_help = "fleet config file naming the store (default: the environment, then ./data)"
    p.add_argument("--config", default=None, help=config_help)
    actions = p.add_subparsers(dest="action", required=True)
    c = actions.add_parser("create", help="a new key; its secret is printed once")
    c.add_argument("--name")
    c.add_argument("--models", help="comma-separated model ids or virtual models (default: all)")
    c.add_argument("--rpm", type=_positive, help="requests per minute")
    c.add_argument("--tpm", type=_positive, help="tokens per minute")
    c.add_argument("--budget", type=_amount, help="spend limit in the fleet's price unit")
    listing = actions.add_parser("list", help="every key (never the secrets)")
    d = actions.add_parser("disable", help="stop accepting a key (kept; --enable undoes it)")
    d.add_argument("key_id")
    d.add_argument("--enable", action="store_true", help="accept the key again")
    r = actions.add_parser("delete", help="revoke a key for good")
    r.add_argument("key_id")
    for action in (c, listing, d, r):  # `keys create --config F` works as `keys --config F …`
        action.add_argument("--config", default=argparse.SUPPRESS, help=config_help)
    p.set_defaults(func=_cmd_keys)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleetgate", description=__doc__)
    parser.add_argument("--version", action="version", version=f"fleetgate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the version").set_defaults(func=_cmd_version)

    p = sub.add_parser("serve", help="run the gateway")
    p.add_argument("--config", required=True, help="fleet config file (YAML)")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument(
        "--log-level",
        choices=LEVELS,
        default=None,
        help="the lowest level logged (default: FLEETGATE_LOG_LEVEL, else info)",
    )
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("epp", help="run as the endpoint picker of an Envoy gateway")
    p.add_argument("--config", required=True, help="fleet config file (YAML)")
    p.add_argument("--host", default="0.0.0.0", help="the gRPC listener's address")
    p.add_argument("--port", type=int, default=9002, help="the gRPC (ext_proc) port")
    p.add_argument("--http-host", default=None, help="default: the config's server.host")
    p.add_argument("--http-port", type=int, default=8080, help="admin, metrics, dashboard")
    p.add_argument(
        "--endpoints",
        type=_positive,
        default=None,
        metavar="N",
        help="name at most N endpoints in a pick (default: every one the plan can fall back "
        "to); 1 for a data plane that reads a single address, such as an ORIGINAL_DST "
        "cluster on the x-gateway-destination-endpoint header",
    )
    p.set_defaults(func=_cmd_epp)

    p = sub.add_parser("envoy-config", help="print an Envoy bootstrap that uses the picker")
    p.add_argument("--config", required=True, help="fleet config file (YAML)")
    p.add_argument("--epp", required=True, help="the picker's gRPC HOST:PORT")
    p.add_argument("--listen", required=True, help="Envoy's own HOST:PORT")
    p.add_argument("--http", default=None, help="the picker's HTTP HOST:PORT (default :8080)")
    p.add_argument("--admin", default="127.0.0.1:9901", help="Envoy's admin HOST:PORT")
    p.add_argument(
        "--body-mode",
        default=BODY_MODES[0],
        choices=BODY_MODES,
        help="how Envoy hands the request body to the picker (STREAMED, BUFFERED: a stalled "
        "picker fails closed within its message timeout; docs/kubernetes.md)",
    )
    p.set_defaults(func=_cmd_envoy_config)

    p = sub.add_parser("demo", help="a simulated fleet with the gateway in front of it")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("explain", help="print the plan a request would follow")
    p.add_argument("--config", required=True)
    p.add_argument("request", help="request body (JSON file, or - for stdin)")
    p.add_argument("-H", "--header", action="append", help="a request header, 'Name: value'")
    p.set_defaults(func=_cmd_explain)

    p = sub.add_parser("check", help="validate a config and print every problem")
    p.add_argument("--config", required=True)
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("diff", help="show the fleet file against the store, applying nothing")
    p.add_argument("--config", required=True)
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser("status", help="the live fleet of a running gateway")
    p.add_argument("--url", required=True, help="the gateway, e.g. http://127.0.0.1:8080")
    p.set_defaults(func=_cmd_status)

    _keys_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.func not in (_cmd_serve, _cmd_epp):
        gc.enable()  # off while `fleetgate.launch` started; `serve` turns it on itself
    try:
        return int(args.func(args))
    except (ConfigError, StoreUnavailable) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
