"""Checks of a plan against its sources (decode.py: the decode check)."""
