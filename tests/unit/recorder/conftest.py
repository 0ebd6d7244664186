"""The recorder tests' fixtures (a temp database, a running Recorder, real worker answers)."""

from tests.support.recorded import answers, db_path, recorder

__all__ = ["answers", "db_path", "recorder"]
