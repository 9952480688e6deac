"""Sounds for a device: fetched from Home Assistant or the web, decoded for it."""
