"""Offline checks of what hassfest would check: manifest, hacs.json, translations."""

import json
from pathlib import Path
import re
from typing import Any

from awesomeversion import AwesomeVersion, AwesomeVersionStrategy
from homeassistant.const import __version__ as ha_version
import pytest
import yaml

from custom_components.xiaozhi import protocol
from custom_components.xiaozhi.protocol import Activity, DeviceEventType

ROOT = Path(__file__).parent.parent
COMPONENT = ROOT / "custom_components" / "xiaozhi"
MANIFEST = json.loads((COMPONENT / "manifest.json").read_text(encoding="utf-8"))
IOT_CLASSES = {
    "assumed_state",
    "calculated",
    "cloud_polling",
    "cloud_push",
    "local_polling",
    "local_push",
}


def _flatten(tree: dict[str, Any], prefix: str = "") -> set[str]:
    """Return every leaf key of a nested translation dict as a dotted path."""
    keys: set[str] = set()
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            keys |= _flatten(value, f"{path}.")
        else:
            keys.add(path)
    return keys


def test_manifest_key_order() -> None:
    """Hassfest wants domain, name, then the other keys sorted."""
    keys = list(MANIFEST)
    assert keys[:2] == ["domain", "name"]
    assert keys[2:] == sorted(keys[2:])


def test_manifest_content() -> None:
    """The keys a custom integration needs, with valid values."""
    assert MANIFEST["domain"] == COMPONENT.name == "xiaozhi"
    assert MANIFEST["config_flow"] is True
    assert "http" in MANIFEST["dependencies"]
    assert MANIFEST["iot_class"] in IOT_CLASSES
    assert MANIFEST["iot_class"] == "local_push"
    for key in ("documentation", "issue_tracker"):
        assert MANIFEST[key].startswith("https://")
    assert MANIFEST["codeowners"]
    assert all(owner.startswith("@") for owner in MANIFEST["codeowners"])
    version = AwesomeVersion(
        MANIFEST["version"],
        ensure_strategy=[
            AwesomeVersionStrategy.CALVER,
            AwesomeVersionStrategy.SEMVER,
            AwesomeVersionStrategy.SIMPLEVER,
            AwesomeVersionStrategy.BUILDVER,
            AwesomeVersionStrategy.PEP440,
        ],
    )
    assert version.valid


def test_hacs_json() -> None:
    """hacs.json names the integration and a Home Assistant it runs on."""
    hacs = json.loads((ROOT / "hacs.json").read_text(encoding="utf-8"))
    assert hacs["name"] == MANIFEST["name"]
    assert AwesomeVersion(ha_version) >= AwesomeVersion(hacs["homeassistant"])


def test_versions_match_the_changelog() -> None:
    """The integration's and the library's versions are the changelog's.

    The manifest holds the integration's version; the root pyproject.toml
    builds the library aioxiaozhi, whose version is ``protocol.__version__``.
    """
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.MULTILINE)
    assert released[0] == MANIFEST["version"]
    assert f"aioxiaozhi {protocol.__version__}" in changelog
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'version = { attr = "aioxiaozhi.__version__" }' in pyproject


def _translation_files() -> list[Path]:
    return sorted((COMPONENT / "translations").glob("*.json"))


@pytest.mark.skipif(
    not (COMPONENT / "translations" / "en.json").exists(),
    reason="no translations yet",
)
def test_translations_complete() -> None:
    """Every language has exactly the English keys and keeps placeholders."""
    english = json.loads(
        (COMPONENT / "translations" / "en.json").read_text(encoding="utf-8")
    )
    english_keys = _flatten(english)
    for path in _translation_files():
        other = json.loads(path.read_text(encoding="utf-8"))
        assert _flatten(other) == english_keys, path.name


@pytest.mark.skipif(
    not (COMPONENT / "services.yaml").exists(), reason="no services yet"
)
def test_services_translated() -> None:
    """Every action and field in services.yaml has an English name."""
    services = yaml.safe_load((COMPONENT / "services.yaml").read_text("utf-8"))
    english = json.loads(
        (COMPONENT / "translations" / "en.json").read_text(encoding="utf-8")
    )
    translated = english["services"]
    assert set(translated) == set(services)
    for service, spec in services.items():
        assert translated[service]["name"]
        assert translated[service]["description"]
        fields = set((spec or {}).get("fields", {}))
        assert set(translated[service].get("fields", {})) == fields
        for field in fields:
            assert translated[service]["fields"][field]["name"]


def test_icons_match_states() -> None:
    """State icons name real states; an event's are keyed by its event type.

    An event entity's state is a timestamp, so icons per event type belong
    under ``state_attributes.event_type.state``.
    """
    icons = json.loads((COMPONENT / "icons.json").read_text(encoding="utf-8"))
    event = icons["entity"]["event"]["device_event"]
    assert "state" not in event
    assert set(event["state_attributes"]["event_type"]["state"]) == {
        event_type.value for event_type in DeviceEventType
    }
    activity = icons["entity"]["sensor"]["activity"]["state"]
    assert set(activity) == {state.value for state in Activity}
