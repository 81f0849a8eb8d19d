"""The searches over builds: a bisection over releases, nightlies or JAX commits, and every change of a window."""
