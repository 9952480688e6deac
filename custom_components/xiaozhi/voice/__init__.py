"""A device's voice: its channel, turns through the pipeline, speech, routing."""
