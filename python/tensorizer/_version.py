"""The package version (tensorizer 2.11.1 keeps it in this module too; `tensorizer.__version__`)."""

__version__ = "0.1.0"
