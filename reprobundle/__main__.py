"""`python -m reprobundle`: the CLI, for interpreters where the `reprobundle` script is not installed."""

if __name__ == "__main__":
    from reprobundle.cli import run

    run()
