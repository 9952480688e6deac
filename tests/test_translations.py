"""The translations match the English source: same keys, same placeholders."""

import json
from pathlib import Path
import re
from typing import Any

import pytest

TRANSLATIONS = Path(__file__).parent.parent / "custom_components/xiaozhi/translations"
LANGUAGES = ("zh-Hans", "vi", "ru", "pt-BR")
PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _load(language: str) -> dict[str, Any]:
    path = TRANSLATIONS / f"{language}.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Return every leaf of a nested translation dict keyed by its dotted path."""
    leaves: dict[str, str] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            leaves |= _flatten(value, f"{path}.")
        else:
            leaves[path] = value
    return leaves


ENGLISH = _flatten(_load("en"))


@pytest.mark.parametrize("language", LANGUAGES)
def test_same_keys(language: str) -> None:
    """Every English key is translated and nothing else is."""
    assert set(_flatten(_load(language))) == set(ENGLISH)


@pytest.mark.parametrize("language", LANGUAGES)
def test_same_placeholders(language: str) -> None:
    """Each string keeps exactly the placeholders of its English source."""
    translated = _flatten(_load(language))
    for path, english in ENGLISH.items():
        expected = set(PLACEHOLDER.findall(english))
        assert set(PLACEHOLDER.findall(translated[path])) == expected, path


@pytest.mark.parametrize("language", LANGUAGES)
def test_no_empty_values(language: str) -> None:
    """No translated string is empty or blank."""
    for path, value in _flatten(_load(language)).items():
        assert isinstance(value, str), path
        assert value.strip(), path
