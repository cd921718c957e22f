"""Allow ``python -m rollstream``."""

from rollstream.cli import main

main()
