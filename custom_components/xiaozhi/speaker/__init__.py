"""The device's speaker and screen: one voice channel per session, and speech."""
