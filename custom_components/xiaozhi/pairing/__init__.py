"""Pairing: codes devices show, identities they prove, and clients not yet paired."""
