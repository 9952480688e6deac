"""Long robustness runs: fuzzing and hostile devices (marked slow)."""
