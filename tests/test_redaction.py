import pytest

from reprobundle.bundle.redaction import REDACTED, redact, redact_env

SECRETS = {
    "GITHUB_TOKEN": "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "MY_PASSWORD": "hunter2",
    "DB_PASSWD": "pw",
    "OPENAI_API_KEY": "sk-abcdefghijklmnopqrstuvwxyz012345",
    "GOOGLE_APPLICATION_CREDENTIALS": "/home/u/.config/gcloud/application_default_credentials.json",
    "DATABASE_URL": "postgres://admin:s3cr3t@db.internal:5432/app",
    "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz",
    "SOME_VAR": "Bearer abcdefghijklmnop12345",
    "NOT_OBVIOUS": "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ7k",
    "SLACK_HOOK": "xoxb-123456789012-abcdefghij",
}
SAFE = {"XLA_FLAGS": "--xla_dump_to=/tmp/dump --xla_cpu_use_thunk_runtime=true", "JAX_ENABLE_X64": "1",
        "PATH": "/usr/bin:/bin", "HOME": "/root", "PWD": "/work", "LANG": "C.UTF-8"}


def test_secret_env_values_are_redacted_and_safe_ones_kept():
    out = redact_env({**SECRETS, **SAFE})
    for k in SECRETS:
        assert out[k] == REDACTED, k
    for k, v in SAFE.items():
        assert out[k] == v, k


def test_redact_nested_values():
    data = {"packages": {"google-auth": "2.0", "keyring": "25"}, "argv": ["--token", SECRETS["GITHUB_TOKEN"]],
            "url": SECRETS["DATABASE_URL"]}
    out = redact(data)
    assert out["packages"] == data["packages"]
    assert out["argv"] == ["--token", REDACTED]
    assert out["url"] == REDACTED


def test_long_temp_paths_are_not_secrets_but_keys_inside_paths_are():
    flags = ("--xla_dump_to=/tmp/reprobundle-replay-k3j2h1x0/contender-0/round-0/artifacts/xla_dump "
             "--xla_dump_hlo_as_text")
    assert redact_env({"XLA_FLAGS": flags}) == {"XLA_FLAGS": flags}
    hidden = "/home/me/keys/Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1u/file"
    assert redact_env({"SOME_PATH": hidden}) == {"SOME_PATH": REDACTED}


def test_secrets_in_files_a_worker_wrote_are_masked_in_place():
    """What an XLA dump writes (its debug options quote XLA_FLAGS' values, text protos escape them): every secret
    value of the environment, each secret word or flag value of a flag list, and token-shaped spans are masked
    with a mask of the same length (binary formats keep their structure); safe flags and short values stay."""
    from reprobundle.bundle.redaction import scrub, scrub_file, secret_values

    env = {**SECRETS, **SAFE, "XLA_FLAGS": "--xla_gpu_cuda_data_dir=/x/ghp_AAAABBBBCCCCDDDDEEEEFFFFGGGGHHHH1234 "
                                           "--xla_cpu_use_thunk_runtime=true", "X_PASSWORD": "pem\nline-two-of-it"}
    secrets = secret_values(env)
    assert "/x/ghp_AAAABBBBCCCCDDDDEEEEFFFFGGGGHHHH1234" in secrets and "pem\\nline-two-of-it" in secrets
    assert all(len(s) >= 8 for s in secrets) and "hunter2" not in secrets and "/tmp/dump" not in secrets
    text = (b'xla_gpu_cuda_data_dir: "/x/ghp_AAAABBBBCCCCDDDDEEEEFFFFGGGGHHHH1234"\nxla_dump_to: "/tmp/dump"\n'
            b'pw: "pem\\nline-two-of-it" url: https://bob:hunter2@h/x\n')
    out = scrub(text, secrets, patterns=True)
    assert len(out) == len(text) and b"ghp_" not in out and b"line-two" not in out and b"hunter2" not in out
    assert b'xla_dump_to: "/tmp/dump"' in out and out.count(b"<redacted>") == 3
    assert scrub(b"nothing here", secrets, patterns=True) == b"nothing here"
    import gzip
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".gz") as f:
        f.write(gzip.compress(text))
        f.flush()
        assert b"ghp_" not in gzip.decompress(scrub_file(f.name, secrets))
    with tempfile.NamedTemporaryFile() as f:
        f.write(b"clean")
        f.flush()
        assert scrub_file(f.name, secrets) is None


ARGV_SECRETS = ["sk-proj-a1b2c3d4e5f6g7h8i9j0k1l2", "hunter2-is-my-password", "ghp_abcdefghijklmnopqrstuvwxyz0123",
                "p4ssw0rd!", "s3cr3t-value", "https://alice:topsecret@example.com/data"]


@pytest.mark.parametrize("argv", [
    ["python", "prog.py", "--api-key=sk-proj-a1b2c3d4e5f6g7h8i9j0k1l2"],
    ["python", "prog.py", "--api_key", "s3cr3t-value"],
    ["python", "prog.py", "--apiKey", "s3cr3t-value"],
    ["python", "prog.py", "--token", "ghp_abcdefghijklmnopqrstuvwxyz0123"],
    ["python", "prog.py", "--password=p4ssw0rd!"],
    ["python", "prog.py", "--secret", "s3cr3t-value", "--steps", "3"],
    ["python", "prog.py", "--db.password", "p4ssw0rd!"],
    ["mysql", "-p", "p4ssw0rd!"],
    ["mysql", "-pp4ssw0rd!"],
    ["python", "prog.py", "PASSWORD=hunter2-is-my-password"],
    ["python", "prog.py", "auth.token=s3cr3t-value"],
    ["python", "prog.py", "sk-proj-a1b2c3d4e5f6g7h8i9j0k1l2"],  # by shape alone
    ["python", "prog.py", "--data", "https://alice:topsecret@example.com/data"],
    ["python", "prog.py", "--header=Bearer ghp_abcdefghijklmnopqrstuvwxyz0123"],
])
def test_secrets_on_a_command_line_are_redacted_in_every_spelling(argv):
    """Class: arguments get the judgement environment variables get, by the option's name in every spelling and by
    the value's shape; the option names and the harmless arguments stay, so the command still reads."""
    from reprobundle.bundle.redaction import redact_argv

    out = redact_argv(argv)
    assert len(out) == len(argv) and out[:2] == argv[:2] or argv[0] == "mysql"
    joined = " ".join(out)
    for secret in ARGV_SECRETS:
        assert secret not in joined and "topsecret" not in joined, out
    assert REDACTED in joined
    assert "--steps 3" in joined or "--steps" not in argv


def test_harmless_command_lines_are_kept():
    from reprobundle.bundle.redaction import redact_argv

    for argv in (["python", "-u", "train.py", "--steps", "20", "--lr=1e-3", "-v", "--config", "cfg.yaml"],
                 ["python", "-P", "-m", "pkg.main", "batch=32", "--out", "/tmp/pytest-of-root/run-17/out"]):
        assert redact_argv(argv) == argv


def test_xla_flags_keep_their_names_and_lose_only_secret_values():
    from reprobundle.bundle.redaction import redact_argv, redact_flags

    # long flag names with a short value read as one random-looking word before; "passes" holds "PASS"
    harmless = ["--xla_backend_optimization_level=0", "--xla_disable_hlo_passes=fusion-wrapper",
                "--xla_cpu_use_thunk_runtime=false", "--xla_dump_to=/tmp/reprobundle-dump"]
    assert redact_flags(harmless) == harmless
    key = "AKIA" + "ABCDEFGHIJKLMNOP"
    assert redact_flags([f"--xla_gpu_per_fusion_autotune_cache_dir={key}", key]) == [
        f"--xla_gpu_per_fusion_autotune_cache_dir={REDACTED}", REDACTED]
    assert redact_argv(["--xla_backend_optimization_level=0", f"--flag={key}"]) == [
        "--xla_backend_optimization_level=0", f"--flag={REDACTED}"]


def test_token_shapes_are_searched_where_their_words_are_and_in_every_text_that_is_not_ascii():
    """scrub looks for a token's shape only in a text that holds its words (an XLA dump is megabytes): a token in
    any case is masked; in a text that is not ASCII every shape is searched, as IGNORECASE folds the Kelvin sign
    onto k ("to\u212aen") and the long s onto s."""
    from reprobundle.bundle.redaction import scrub

    for token in (b"Bearer abcdefgh12345678", b"TOKEN abcdefgh12345678", b"https://u:pw@h/x", b"AKIA1234567890ABCDEF",
                  b"hf_" + b"q" * 22, b"-----BEGIN RSA PRIVATE KEY-----", b"eyJ" + b"a" * 12 + b"." + b"b" * 12 + b"."):
        text = b"ROOT %add.3 = f32[8] add(%a, %b)\n" + token + b"\n"
        out = scrub(text, [], patterns=True)
        assert len(out) == len(text) and token not in out and b"<redacted>" in out, token
    folded = "x = 1\nto\u212aen abcdefgh12345678\n".encode()
    assert "to\u212aen".encode() not in scrub(folded, [], patterns=True)
    hlo = b"ENTRY %main { %p = f32[8] parameter(0) ROOT %t = token[] after-all() }\n" * 1000
    assert scrub(hlo, [], patterns=True) is hlo
