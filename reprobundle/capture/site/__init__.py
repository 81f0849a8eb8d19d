"""The folder `reprobundle capture` puts first on a program's PYTHONPATH: it holds only `sitecustomize.py`."""
