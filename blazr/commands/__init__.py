"""The CLI commands, one module per command group; blazr/cli.py registers them on the typer app."""
