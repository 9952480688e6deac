"""Print what a fresh Home Assistant would pip-install at start-up, one a line.

Run by the smoke venv's own Python once ``homeassistant`` is installed in it::

    python demo/smoke/ha_requirements.py MANIFEST.json ... [--domain DOMAIN ...]

The integrations Home Assistant sets up are its default ones, the domains of
``configuration.yaml`` (``--domain``) and the custom integrations whose
``manifest.json`` files are given, each with the integrations it depends on.
Their ``requirements`` are what Home Assistant would install (the smoke run
starts it with ``--skip-pip``, so they must be there). A custom manifest's own
requirements are printed as written: ``package_constraints.txt`` of the
installed Home Assistant pins what it pins.

It reads the installed Home Assistant only, and imports nothing of this
repository: it runs in a venv that has none of it.
"""

import argparse
from collections.abc import Iterable
import json
from pathlib import Path
import sys


def read_manifest(path: Path) -> dict[str, object]:
    """Return a manifest (empty for an integration that does not exist)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def _strings(value: object) -> list[str]:
    return (
        [item for item in value if isinstance(item, str)]
        if isinstance(value, list)
        else []
    )


def requirements(
    components: Path, domains: Iterable[str], custom: Iterable[dict[str, object]]
) -> list[str]:
    """Return the requirements of ``domains``, ``custom`` and their dependencies."""
    wanted: set[str] = set()
    todo = list(domains)
    for manifest in custom:
        wanted.update(_strings(manifest.get("requirements")))
        todo.extend(_strings(manifest.get("dependencies")))
        todo.extend(_strings(manifest.get("after_dependencies")))
    seen: set[str] = set()
    while todo:
        domain = todo.pop()
        if domain in seen:
            continue
        seen.add(domain)
        manifest = read_manifest(components / domain / "manifest.json")
        wanted.update(_strings(manifest.get("requirements")))
        todo.extend(_strings(manifest.get("dependencies")))
        todo.extend(_strings(manifest.get("after_dependencies")))
    return sorted(wanted, key=str.lower)


def main(argv: list[str]) -> int:
    """Print the requirements."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("manifests", nargs="*", type=Path)
    parser.add_argument("--domain", action="append", default=[])
    args = parser.parse_args(argv)

    from homeassistant import bootstrap  # noqa: PLC0415 - only in the smoke venv
    import homeassistant.components  # noqa: PLC0415

    components = Path(homeassistant.components.__file__).parent
    domains = {
        *bootstrap.CORE_INTEGRATIONS,
        *bootstrap.DEFAULT_INTEGRATIONS,
        *args.domain,
    }
    custom = [read_manifest(path) for path in args.manifests]
    for line in requirements(components, domains, custom):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
