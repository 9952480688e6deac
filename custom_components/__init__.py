"""Custom components."""
