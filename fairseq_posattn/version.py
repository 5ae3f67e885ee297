"""The package's version, read by setup.py without importing the package; CHANGELOG.md lists each release."""

__version__ = "0.4.0"
