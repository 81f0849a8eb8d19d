"""The suite's settings for packs and replays that only need to run, not to measure well: few timed calls, no XLA
dump, no profile. One name per meaning; a test that asserts a count spells that count out where it asserts it."""

PACK = dict(warmup=1, repeat=2, dump=False, profile=False)  # reprobundle.pack, capture, api.pack_script, ...
PACK_ARGS = ["--warmup", "1", "--repeat", "2", "--no-profile", "--no-dump"]  # `reprobundle pack` / `capture`
REPLAY_ARGS = ["--warmup", "1", "--repeat", "3", "--no-profile"]  # `reprobundle replay`
