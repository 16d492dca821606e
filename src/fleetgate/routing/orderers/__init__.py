"""Candidate orderers, one strategy per module."""
