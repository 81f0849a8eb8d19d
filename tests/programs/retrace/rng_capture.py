"""rng.py as a running program (no factory): `reprobundle capture` on two releases, then `compare A B`."""
import jax

f = jax.jit(lambda key, s: jax.random.normal(key, (64,)) * s)
for _ in range(2):
    f(jax.random.key(0), 2.0).block_until_ready()
