"""`python -m replayer.cli`."""

from replayer.cli.main import main

main()
