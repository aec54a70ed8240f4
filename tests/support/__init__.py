"""Helpers the test files share: test files import from here (or from conftest), never from one another
(tests/test_layers.py checks it)."""
