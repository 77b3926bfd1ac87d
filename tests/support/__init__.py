"""Helpers shared by more than one test directory: child processes, a real walqueue-serve, raw connections.

Importable as `support` from every test module: tests/conftest.py puts
tests/ on sys.path (pytest's prepend import mode puts only each test's own
directory there, so a helper kept in tests/cli could not be imported from
tests/worker).
"""
