"""Secret redaction for environment metadata, applied to everything a bundle or run records about its machine.

A value is replaced by "<redacted>" when its variable name looks secret (token, key, password, credential...)
or when the value itself looks like one (URLs with user:password, bearer tokens, well-known key formats, long
high-entropy strings, paths to credential files). Redaction errs on the side of hiding.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

REDACTED = "<redacted>"

_SECRET_NAME_RE = re.compile(
    r"(TOKEN|SECRET|PASS|PWD|API_?KEY|ACCESS_?KEY|PRIVATE|CREDENTIAL|AUTH|COOKIE|SESSION|SIGNATURE|"
    r"_KEY$|^KEY$|CERT|SSH|GPG|PAT$|DSN|WEBHOOK)",
    re.IGNORECASE,
)
# Variables whose values we keep even though their names match loosely above.
_SAFE_NAMES = frozenset({"PWD", "OLDPWD", "SSH_TTY", "SSH_CONNECTION", "SSH_CLIENT"})
_SECRET_VALUE_RES = [
    re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE),  # scheme://user:password@host
    re.compile(r"\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE),
    re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"),  # Google API key
    re.compile(r"\bya29\.[0-9A-Za-z_-]{20,}"),  # Google OAuth access token
    re.compile(r"\b(gh[pousr]|github_pat)_[A-Za-z0-9_]{20,}"),  # GitHub tokens
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),  # Slack tokens
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),  # OpenAI-style keys
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),  # Hugging Face tokens
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\."),  # JWT
    re.compile(r"(credentials?|service[-_]?account|\.netrc|\.pgpass|id_rsa|id_ed25519|\.pem|\.p12|keyfile)",
               re.IGNORECASE),  # paths to credential files
]


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
