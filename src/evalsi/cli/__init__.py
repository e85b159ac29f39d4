"""The ``evalsi`` command: a thin shell over the library, one module per command group."""
