"""Voice: the device as an Assist satellite."""
