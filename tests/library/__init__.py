"""Tests for the device protocol layer (no Home Assistant involved)."""
