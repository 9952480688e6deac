"""The smoke run's private venv: one Home Assistant release and what it loads.

``.smoke/venvs/<version>`` holds ``homeassistant==<version>`` installed with
the Python ``scripts/python314`` gives, plus what Home Assistant would
pip-install at start-up for the integrations the run loads
(``ha_requirements.py`` reads them from the installed release), pinned by
that release's ``package_constraints.txt``. It is rebuilt only when its
inputs change: the interpreter, the version, the manifests, the configured
domains and ``ha_requirements.py`` (a stamp holds their hash).
"""

from collections.abc import Mapping, Sequence
import contextlib
import fcntl
import hashlib
import json
import os
from pathlib import Path
import re
import shutil
import subprocess
import sys
import urllib.request

from .. import ROOT, say
from . import SmokeError
from .config import CONFIGURED_DOMAINS

SMOKE_DIR = ROOT / ".smoke"
REQUIREMENTS_SCRIPT = Path(__file__).with_name("ha_requirements.py")
MANIFESTS = (
    ROOT / "custom_components" / "xiaozhi" / "manifest.json",
    ROOT / "demo" / "voice_engines" / "manifest.json",
)
PYPI_JSON = "https://pypi.org/pypi/homeassistant/json"
RELEASE = re.compile(r"^\d+\.\d+\.\d+$")
SERIES = re.compile(r"^\d+\.\d+$")


def _run(command: Sequence[str | Path], env: Mapping[str, str] | None = None) -> str:
    """Run a command; SmokeError with its output when it fails."""
    result = subprocess.run(  # noqa: S603 - our own commands
        [str(part) for part in command],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()
        raise SmokeError(
            f"{' '.join(str(part) for part in command[:4])} ... failed "
            f"(exit code {result.returncode}):\n{output[-3000:]}"
        )
    return str(result.stdout)


def version_key(version: str) -> tuple[int, ...]:
    """Return a release number as numbers, for sorting."""
    return tuple(int(part) for part in version.split("."))


def parse_pip_index(output: str) -> list[str]:
    """Return the releases of a ``pip index versions`` answer, newest first."""
    match = re.search(r"^Available versions: (.+)$", output, re.MULTILINE)
    found = [v.strip() for v in match.group(1).split(",")] if match else []
    return sorted((v for v in found if RELEASE.match(v)), key=version_key, reverse=True)


def available_releases() -> list[str]:
    """Return the ``homeassistant`` releases on PyPI, newest first."""
    try:
        output = _run(
            [
                sys.executable,
                "-m",
                "pip",
                "index",
                "versions",
                "homeassistant",
                "--disable-pip-version-check",
            ]
        )
    except SmokeError as err:
        say(f"pip index failed ({str(err).splitlines()[0]}); asking PyPI's JSON API")
    else:
        if releases := parse_pip_index(output):
            return releases
    with urllib.request.urlopen(PYPI_JSON, timeout=30) as response:
        data = json.load(response)
    return sorted(
        (v for v in data["releases"] if RELEASE.match(v)), key=version_key, reverse=True
    )


def pick_release(wanted: str | None, releases: Sequence[str]) -> str:
    """Return the release to test: ``wanted``, or the newest of a series.

    No ``wanted``: the newest release; ``2026.11``: the newest 2026.11.x;
    ``2026.11.0``: that one, if it exists.
    """
    if not releases:
        raise SmokeError("PyPI lists no homeassistant release")
    if wanted is None:
        return releases[0]
    if RELEASE.match(wanted):
        if wanted not in releases:
            raise SmokeError(f"homeassistant {wanted} is not on PyPI")
        return wanted
    if SERIES.match(wanted):
        if series := [v for v in releases if v.startswith(f"{wanted}.")]:
            return series[0]
        raise SmokeError(f"PyPI has no homeassistant {wanted}.x")
    raise SmokeError(f"Not a Home Assistant release number: {wanted!r}")


def _python314() -> str:
    return _run([ROOT / "scripts" / "python314"]).strip()


def stamp(python: str, version: str) -> str:
    """Return the hash of everything the venv is built from."""
    digest = hashlib.sha256()
    digest.update(python.encode())
    digest.update(_run([python, "-c", "import sys; print(sys.version)"]).encode())
    digest.update(version.encode())
    digest.update(" ".join(CONFIGURED_DOMAINS).encode())
    for path in (REQUIREMENTS_SCRIPT, *MANIFESTS):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _installer() -> list[str]:
    """Return the command that installs into another venv (uv, else pip)."""
    uv = Path(sys.executable).with_name("uv")
    return [str(uv), "pip", "install", "-q"] if uv.exists() else []


def _install(venv_python: Path, args: Sequence[str | Path]) -> None:
    installer = _installer()
    if installer:
        try:
            _run(
                [*installer, "--python", venv_python, *args],
                env={**os.environ, "UV_NATIVE_TLS": "1"},
            )
        except SmokeError as err:
            say(f"uv failed ({str(err).splitlines()[0]}); falling back to pip")
        else:
            return
    _run(
        [
            venv_python,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            *args,
        ]
    )


def build(venv: Path, python: str, version: str) -> None:
    """Create ``venv`` with Home Assistant ``version`` and what it loads."""
    shutil.rmtree(venv, ignore_errors=True)
    _run([python, "-m", "venv", venv])
    venv_python = venv / "bin" / "python"
    say(f"Installing homeassistant=={version} into {venv.relative_to(ROOT)}")
    _install(venv_python, [f"homeassistant=={version}"])
    package = _run(
        [venv_python, "-c", "import homeassistant; print(homeassistant.__file__)"]
    ).strip()
    constraints = Path(package).with_name("package_constraints.txt")
    requirements = _run(
        [
            venv_python,
            REQUIREMENTS_SCRIPT,
            *MANIFESTS,
            *(arg for domain in CONFIGURED_DOMAINS for arg in ("--domain", domain)),
        ]
    )
    listed = venv / "smoke-requirements.txt"
    listed.write_text(requirements, encoding="utf-8")
    say(
        f"Installing {len(requirements.split())} requirements of the integrations "
        "Home Assistant loads (some build from source: allow a minute)"
    )
    _install(
        venv_python,
        [f"homeassistant=={version}", "-r", listed, "-c", constraints],
    )


def ensure_venv(version: str, *, rebuild: bool = False) -> tuple[Path, bool]:
    """Return the Python of the venv for ``version``, and whether it was built."""
    python = _python314()
    venv = SMOKE_DIR / "venvs" / version
    venv.parent.mkdir(parents=True, exist_ok=True)
    wanted = stamp(python, version)
    with (venv.parent / f"{version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp_file = venv / ".smoke-stamp"
        current = None
        with contextlib.suppress(OSError):
            current = stamp_file.read_text(encoding="utf-8").strip()
        built = rebuild or current != wanted or not (venv / "bin" / "python").exists()
        if built:
            build(venv, python, version)
            stamp_file.write_text(wanted + "\n", encoding="utf-8")
        else:
            say(f"Using the cached venv {venv.relative_to(ROOT)}")
    return venv / "bin" / "python", built


def http_store_version(python: Path) -> tuple[int, int]:
    """Return the version of the HTTP settings store the release reads."""
    answer = _run(
        [
            python,
            "-c",
            (
                "from homeassistant.components.http import config as c; "
                "print(c.STORAGE_VERSION, c.STORAGE_MINOR_VERSION)"
            ),
        ]
    ).split()
    return int(answer[0]), int(answer[1])
