"""Firmware updates: where releases come from, and installing one on a device."""
