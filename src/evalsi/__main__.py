"""``python -m evalsi``: the same as the ``evalsi`` command."""

from evalsi.cli.main import main

main()
