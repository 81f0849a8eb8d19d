"""Secret redaction for environment metadata and command lines, applied to everything a bundle or run records
about its machine and to the command line of a captured program.

A value is replaced by "<redacted>" when its variable name looks secret (token, key, password, credential...)
or when the value itself looks like one (URLs with user:password, bearer tokens, well-known key formats, long
high-entropy strings, paths to credential files). A command line's arguments get the same judgement: an option's
value by the option's name (`--api-key=V`, `--token V`, `-p V`, `-pV`, `NAME=V`) and every argument by its shape.
Redaction errs on the side of hiding.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Sequence

REDACTED = "<redacted>"

_SECRET_NAME_RE = re.compile(
    r"(TOKEN|SECRET|PASS|PWD|API_?KEY|ACCESS_?KEY|PRIVATE|CREDENTIAL|AUTH|COOKIE|SESSION|SIGNATURE|"
    r"_KEY$|^KEY$|CERT|SSH|GPG|PAT$|DSN|WEBHOOK)",
    re.IGNORECASE,
)
# Variables whose values we keep even though their names match loosely above.
_SAFE_NAMES = frozenset({"PWD", "OLDPWD", "SSH_TTY", "SSH_CONNECTION", "SSH_CLIENT"})
# The shapes of a secret's value, each with the words (lower case) every match of it contains: scrub reads whole
# XLA dumps, and a text with none of a shape's words is not searched for it.
_SECRET_SHAPES: list[tuple[re.Pattern, tuple[bytes, ...]]] = [
    (re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE), (b"://",)),  # scheme://user:password@host
    (re.compile(r"\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE), (b"bearer", b"basic", b"token")),
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), (b"akia", b"asia")),  # AWS access key id
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), (b"aiza",)),  # Google API key
    (re.compile(r"\bya29\.[0-9A-Za-z_-]{20,}"), (b"ya29.",)),  # Google OAuth access token
    (re.compile(r"\b(gh[pousr]|github_pat)_[A-Za-z0-9_]{20,}"),
     (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_")),  # GitHub tokens
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), (b"xox",)),  # Slack tokens
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"), (b"sk-",)),  # OpenAI-style keys
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), (b"hf_",)),  # Hugging Face tokens
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), (b"private key-----",)),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\."), (b"eyj",)),  # JWT
    (re.compile(r"(credentials?|service[-_]?account|\.netrc|\.pgpass|id_rsa|id_ed25519|\.pem|\.p12|keyfile)",
                re.IGNORECASE),  # paths to credential files
     (b"credential", b"service", b".netrc", b".pgpass", b"id_rsa", b"id_ed25519", b".pem", b".p12", b"keyfile")),
]
_SECRET_VALUE_RES = [shape for shape, _ in _SECRET_SHAPES]


def _entropy_per_char(s: str) -> float:
    counts = Counter(s)
    return -sum(c / len(s) * math.log2(c / len(s)) for c in counts.values())


def looks_secret_value(value: str) -> bool:
    if any(r.search(value) for r in _SECRET_VALUE_RES):
        return True
    # A long unbroken run of mixed characters with high entropy is most likely a key. An absolute path is judged
    # by its components: a long temp path is not a key, a key hidden in one component still is.
    for word in re.findall(r"[A-Za-z0-9+/_=-]{32,}", value):
        parts = word.split("/") if re.search(r"(^|=)/", word) else [word]  # "/a/b" or "--flag=/a/b"
        if any(_looks_random(part) for part in parts):
            return True
    return False


def _looks_random(word: str) -> bool:
    return (len(word) >= 32 and _entropy_per_char(word) > 4.0 and re.search(r"[0-9]", word) is not None
            and re.search(r"[A-Za-z]", word) is not None)


def looks_secret_name(name: str) -> bool:
    return name.upper() not in _SAFE_NAMES and bool(_SECRET_NAME_RE.search(name))


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: REDACTED if looks_secret_name(k) or looks_secret_value(str(v)) else v for k, v in env.items()}


# Short options that take a password in common tools (mysql -p, sshpass -p); not -P or -u: python's own flags.
_SECRET_SHORT_OPTIONS = frozenset({"-p"})
_OPTION_RE = re.compile(r"^(-{1,2})([A-Za-z][A-Za-z0-9_.-]*)(=(.*))?$", re.DOTALL)
_ASSIGNMENT_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.DOTALL)


def _secret_option(name: str) -> bool:
    """An option or assignment name that says its value is secret (`api-key`, `db.password`, `HF_TOKEN`)."""
    return looks_secret_name(re.sub(r"[-.]", "_", name))


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line as it may be stored, printed or exported: every argument that looks like a secret
    (`looks_secret_value`), every value of an option or `NAME=VALUE` whose name looks secret (`looks_secret_name`,
    in every spelling: `--api-key=V`, `--api_key V`, `--apiKey V`, `-p V`, `-pV`, `API_KEY=V`), replaced by
    "<redacted>"; the option names stay, so the command still reads."""
    out: list[str] = []
    hide_next = False
    for arg in map(str, argv):
        if hide_next:
            hide_next = False
            if not arg.startswith("-") or looks_secret_value(arg):
                out.append(REDACTED)
                continue
        arg, hide_next = _redacted_arg(arg)
        out.append(arg)
    return out


def _redacted_arg(arg: str) -> tuple[str, bool]:
    """One argument of a command line redacted, and whether the next argument is its secret option's value."""
    option = _OPTION_RE.match(arg)
    assignment = None if option else _ASSIGNMENT_RE.match(arg)
    hide_next = False
    if arg[:2] in _SECRET_SHORT_OPTIONS and len(arg) > 2 and arg[2] != "=" and not (
            option and _secret_option(option.group(2))):
        arg = f"{arg[:2]}{REDACTED}"  # -pVALUE (but -password VALUE is the option `password`)
    elif option:
        arg, hide_next = _redacted_option(arg, option)
    elif assignment and (_secret_option(assignment.group(1)) or looks_secret_value(assignment.group(2))):
        arg = f"{assignment.group(1)}={REDACTED}"
    if REDACTED not in arg and _judged_whole(option, assignment) and looks_secret_value(arg):
        arg = REDACTED
    return arg, hide_next


def _judged_whole(option: re.Match | None, assignment: re.Match | None) -> bool:
    """Whether an argument is judged as one word: not a `--name=value` or `NAME=value`, whose name and value were
    judged each by its rule (as one word, a long flag name and its short value read as a random key)."""
    return not (option and option.group(3)) and assignment is None


def _redacted_option(arg: str, option: re.Match) -> tuple[str, bool]:
    """An option redacted when its name or its `=value` looks secret, and whether its value is the next argument."""
    dashes, name, has_value, value = option.groups()
    secret_name = _secret_option(name) or (dashes == "-" and f"-{name[:1]}" in _SECRET_SHORT_OPTIONS)
    if has_value is None:
        return arg, secret_name
    if secret_name or looks_secret_value(value):  # --name=value
        return f"{dashes}{name}={REDACTED}", False
    return arg, False


def redact_flags(flags: Sequence[str]) -> list[str]:
    """XLA flags as they may be stored: a `--name=value` whose value looks secret keeps its name; a flag's name alone
    is never judged by the secret-name words (`--xla_disable_hlo_passes` names passes, not a password), nor read as
    one random-looking word with its value."""
    out = []
    for flag in map(str, flags):
        name, eq, value = flag.partition("=")
        if eq:
            out.append(f"{name}={REDACTED}" if looks_secret_value(value) else flag)
        else:
            out.append(REDACTED if looks_secret_value(flag) else flag)
    return out


def redact(obj: Any) -> Any:
    """Redact every string that looks like a secret, recursively. Maps of environment variables go through
    `redact_env` first, which also judges by name."""
    if isinstance(obj, dict):
        return {k: redact(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    if isinstance(obj, str) and looks_secret_value(obj):
        return REDACTED
    return obj


# ------------------------------------------------------------------------------------- files a program wrote

MIN_SECRET_LEN = 8  # shorter values are not looked for in files: replacing them would garble unrelated text
_FLAG_LIST_NAMES = ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "TF_XLA_FLAGS")
_TOKEN_SHAPES = _SECRET_SHAPES[:-1]  # the shapes of tokens and credentials in URLs (not the credential-path words)


def secret_values(env: dict[str, str]) -> list[str]:
    """The secrets an environment holds, as they may appear in files a program run in it wrote (an XLA dump writes
    its debug options, XLA_FLAGS' values among them): every value `redact_env` hides; inside flag lists and other
    multi-word values, each word and each `--flag=value`'s value that looks secret by `looks_secret_value` (or by
    its flag's name), each line of a multi-line value; and their escaped forms (as text protos and JSON write them).
    Longest first; shorter than MIN_SECRET_LEN characters left out."""
    found: set[str] = set()
    for name, value in env.items():
        if isinstance(value, str) and value.strip():
            found |= _secrets_of_variable(name, value)
    escaped = set()
    for value in found:
        escaped.add(value.encode("unicode_escape").decode("ascii"))
        escaped.add(value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
    return sorted((v for v in found | escaped if len(v) >= MIN_SECRET_LEN), key=lambda v: (-len(v), v))


def _secrets_of_variable(name: str, value: str) -> set[str]:
    """What one environment variable holds that is secret: its value and lines when its name or value looks
    secret; the words and `--flag=value` values that do (in a secret variable or a flag list)."""
    by_name = looks_secret_name(name)
    if not (by_name or looks_secret_value(value) or name in _FLAG_LIST_NAMES):
        return set()
    found: set[str] = set()
    if by_name or looks_secret_value(value):
        found.add(value)
        found.update(line.strip() for line in value.splitlines())
    for word in value.split():
        found |= _secrets_of_word(word)
    return found


def _secrets_of_word(word: str) -> set[str]:
    flag, eq, flag_value = word.partition("=")
    found = {word} if looks_secret_value(word) else set()
    if eq and (looks_secret_value(flag_value) or looks_secret_name(flag.lstrip("-"))):
        found |= {flag_value, flag_value.strip("'\"")}
    return found


def _mask(n: int) -> bytes:
    """A replacement of exactly n bytes: binary formats (protobufs, offsets) keep their structure."""
    return (REDACTED.encode() + b"*" * n)[:n]


def scrub(data: bytes, secrets: list[str], *, patterns: bool = False) -> bytes:
    """`data` with every occurrence of each secret replaced by a mask of the same length ("<redacted>***"), and
    with `patterns`, every span that has the shape of a token or of credentials in a URL too (text only).
    Returns `data` itself when nothing was found."""
    out = data
    for secret in secrets:
        needle = secret.encode("utf-8", "surrogateescape")
        if needle in out:
            out = out.replace(needle, _mask(len(needle)))
    if patterns:
        # ASCII text only: IGNORECASE also folds some other letters onto ASCII ones (the Kelvin sign onto k)
        lowered = out.lower() if out.isascii() else None
        shapes = [r for r, words in _TOKEN_SHAPES if lowered is None or any(word in lowered for word in words)]
        if not shapes:
            return out
        try:
            text = out.decode("utf-8")
        except UnicodeDecodeError:
            return out
        changed = text
        for r in shapes:
            changed = r.sub(lambda m: _mask(len(m.group(0).encode())).decode("ascii"), changed)
        if changed != text:
            out = changed.encode("utf-8")
    return out


def scrub_file(path, secrets: list[str], *, patterns: bool = False) -> bytes | None:
    """The bytes of a file a worker wrote with the secrets masked (a gzip file: inside it), or None when it holds
    none (store the file as it is)."""
    import gzip

    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        try:
            inner = gzip.decompress(data)
        except (OSError, EOFError, ValueError):
            inner = None
        if inner is not None:
            clean_inner = scrub(inner, secrets, patterns=patterns)
            return None if clean_inner is inner else gzip.compress(clean_inner, mtime=0)
    cleaned = scrub(data, secrets, patterns=patterns)
    return None if cleaned is data else cleaned


def redact_environment(env: Any) -> Any:
    """An environment map as bundles and runs record it, redacted: its `env_vars` by name and value (`redact_env`),
    every other string by value (`redact`), maps of variables (`thread_env`...) included."""
    if not isinstance(env, dict):
        return redact(env)
    env = dict(env)
    if isinstance(env.get("env_vars"), dict):
        env["env_vars"] = redact_env(env["env_vars"])
    return redact(env)
