"""Tests of the local (bubblewrap) provider."""
