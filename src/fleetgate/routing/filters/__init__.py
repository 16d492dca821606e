"""Candidate filters, one rule per module."""
