"""``python -m fstate``: the ``fstate`` command."""

from fstate.cli.app import main

if __name__ == "__main__":
    main()
