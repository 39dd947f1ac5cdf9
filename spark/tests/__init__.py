"""disq_spark tests (a package: its conftest must not be the `conftest` module the client tests import)."""
