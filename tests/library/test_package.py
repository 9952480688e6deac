"""The package as its users get it: no Home Assistant, a core without PyAV.

These run wherever ``aioxiaozhi`` is installed: from the wheel in a venv
without Home Assistant (``scripts/build-library``), and linked onto its
source in the development venv.
"""

import ast
from importlib import metadata
import os
from pathlib import Path
import re
import subprocess
import sys

import pytest

import aioxiaozhi
import aioxiaozhi.testing

PACKAGES = (Path(aioxiaozhi.__file__).parent, Path(aioxiaozhi.testing.__file__).parent)
README = Path(__file__).parents[2] / "library" / "README.md"
# What needs the ``audio`` extra (PyAV, numpy); everything else must not.
NEEDS_AUDIO = {
    "aioxiaozhi.audio.codec",
    "aioxiaozhi.audio.live",
    "aioxiaozhi.audio.ogg",
    "aioxiaozhi.audio.wake",
}


def _modules() -> list[str]:
    """Return every module of the package, by its dotted name."""
    names = []
    for root, prefix in zip(
        PACKAGES, ("aioxiaozhi", "aioxiaozhi.testing"), strict=True
    ):
        for path in sorted(root.rglob("*.py")):
            if prefix == "aioxiaozhi" and path.parent.name == "testing":
                continue
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts[-1:] == ("__main__",):
                continue
            names.append(".".join((prefix, *parts)))
    return names


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - this interpreter, our code
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _import_all(
    names: list[str], *, blocked: tuple[str, ...], then: str = ""
) -> subprocess.CompletedProcess[str]:
    """Import ``names`` in a fresh interpreter where ``blocked`` cannot load."""
    return _run(
        "import importlib, sys\n"
        + "".join(f"sys.modules[{module!r}] = None\n" for module in blocked)
        + f"for name in {names!r}:\n"
        + "    importlib.import_module(name)\n"
        + then
    )


def test_every_module_is_found() -> None:
    modules = _modules()
    assert "aioxiaozhi.session" in modules
    assert "aioxiaozhi.mqtt.server" in modules
    assert "aioxiaozhi.testing.device" in modules
    assert len(modules) > 40


@pytest.mark.parametrize("root", PACKAGES, ids=["aioxiaozhi", "testing"])
def test_no_import_leaves_the_package(root: Path) -> None:
    """Imports are relative or of dependencies: never Home Assistant's."""
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                assert top not in {"homeassistant", "custom_components", "simulator"}, (
                    f"{path.name} imports {name}"
                )


def test_every_module_imports_without_home_assistant() -> None:
    """Import all of it in a fresh interpreter where Home Assistant cannot load."""
    result = _import_all(
        _modules(),
        blocked=("homeassistant",),
        then="assert not [m for m in sys.modules if m.startswith('homeassistant.')]\n",
    )
    assert result.returncode == 0, result.stderr


def test_the_core_needs_no_pyav() -> None:
    """``pip install aioxiaozhi`` without the audio extra serves devices."""
    core = [
        name
        for name in _modules()
        if name not in NEEDS_AUDIO and not name.startswith("aioxiaozhi.testing")
    ]
    result = _import_all(core, blocked=("av", "numpy"))
    assert result.returncode == 0, result.stderr
    # And the audio modules do need it: the extra is not decoration.
    blocked = _run(
        "import sys\nsys.modules['av'] = None\nimport aioxiaozhi.audio.codec"
    )
    assert blocked.returncode != 0
    assert "import of av halted" in blocked.stderr


@pytest.mark.skipif(
    not os.environ.get("AIOXIAOZHI_FROM_WHEEL"), reason="run from the source tree"
)
def test_the_tests_run_on_the_wheel() -> None:
    """``scripts/build-library`` tests what it built, not the source tree."""
    for root in PACKAGES:
        assert "site-packages" in root.parts, root


def test_version_and_types() -> None:
    assert metadata.version("aioxiaozhi") == aioxiaozhi.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", aioxiaozhi.__version__)
    for root in PACKAGES:
        assert (root / "py.typed").is_file()
    assert (PACKAGES[1] / "firmware.json").is_file()


def test_the_readme_example_pairs_and_calls_a_tool(tmp_path: Path) -> None:
    """The README's server pairs the emulator, calls one tool and ends."""
    blocks = re.findall(
        r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S
    )
    assert len(blocks) == 1
    example = tmp_path / "example.py"
    example.write_text(blocks[0], encoding="utf-8")
    result = subprocess.run(  # noqa: S603 - this interpreter, the README
        [sys.executable, str(example)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3, result.stdout
    assert re.fullmatch(r"The device shows \d{6}; the user enters it\.", lines[0])
    assert lines[1] == "Paired aa:bb:cc:dd:ee:01: 11 tools"
    assert lines[2] == "set_volume -> true; the device's volume is now 40"
