"""Secrets planted where nsys records them in an export, for the tests that check none leaves."""

import secrets
import sqlite3
import string


def random_text(length: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


class Planted:
    """Random secrets, each with its random part: neither may appear in any output."""

    def __init__(self):
        self.values: dict[str, tuple[str, str]] = {}  # label -> (secret as written, its random part)

    def add(self, label: str, prefix: str, random_part: str, suffix: str = "") -> str:
        self.values[label] = (prefix + random_part + suffix, random_part)
        return prefix + random_part + suffix

    def __getitem__(self, label: str) -> str:
        return self.values[label][0]

    def strings(self) -> list[str]:
        return [s for pair in self.values.values() for s in pair]

    def found(self, text: str) -> list[str]:
        """The labels of the secrets `text` holds whole or in part (their random part)."""
        return [label for label, (value, part) in self.values.items() if value in text or part in text]


def add_string(conn: sqlite3.Connection, value: str) -> None:
    """`value` among the export's strings, as nsys keeps a line the program printed."""
    conn.execute("INSERT INTO StringIds (id, value) SELECT max(id) + 1, ? FROM StringIds", (value,))


def plant(conn: sqlite3.Connection, text: str, *, arguments: list[str], environment: str, user: str,
          host: str) -> None:
    """`text` in an NVTX range around every CUDA runtime call of each thread (so that it reaches
    every GEMM launch's ranges) and printed by the program; `arguments` after process 0's
    command line (its ARGUMENT_7 on), `environment` (NAME="value") and `user` where nsys records
    process 0's, `host` as the target's host name. Committed."""
    conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                 "SELECT min(start) - 1000, max(end) + 1000, 59, ?, globalTid, 0 "
                 "FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid", (text,))
    add_string(conn, f"stdout: {text}")
    conn.executemany("INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)", [
        *((f"PROCESS_0:ARGUMENT_{7 + i}", argument) for i, argument in enumerate(arguments)),
        ("PROCESS_0:ENVIRONMENT_VARIABLE", environment), ("PROCESS_0:USER_NAME", user)])
    conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'Hostname'", (host,))
    conn.commit()


# --- a corpus of secret shapes, for generated secrets ----------------------------------------------
#
# The shapes (prefix, alphabet, length) of the secrets public secret scanners look for, read from
# their rule sets, not copied from them; secrets of these shapes are generated afresh by each test
# (hypothesis), never kept as a list for the rules to be tuned to. Sources:
#   gitleaks, config/gitleaks.toml (commit b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b):
#     https://github.com/gitleaks/gitleaks/blob/master/config/gitleaks.toml
#   trufflehog's detectors: https://github.com/trufflesecurity/trufflehog/tree/main/pkg/detectors
#   detect-secrets' plugins (AWS secret keys, Basic auth, keyword assignments):
#     https://github.com/Yelp/detect-secrets/tree/master/detect_secrets/plugins
# Their generic rules give the key/value contexts (KEY_WORDS, and the forms in
# tests/test_redaction_fails_closed.py): a key naming access, auth, credential(s), key, password,
# secret or token, then `=`, `:`, `:=`, `=>` or a space, then the value.

ALNUM = string.ascii_letters + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits
HEX = "0123456789abcdef"
BASE64 = ALNUM + "+/"
URL_SAFE = ALNUM + "_-"
# A password with no shape: what a user types (no whitespace, quote or the separators , ; & | that
# end a value in a line of text).
PASSWORD = ALNUM + "!#$%()*+-./<>?@[]^_{}~"

# name -> the parts of a secret of that shape: literal text, or (alphabet, shortest, longest)
SHAPES: dict[str, tuple] = {
    "github-pat": ("ghp_", (ALNUM, 36, 36)),
    "github-oauth": ("gho_", (ALNUM, 36, 36)),
    "github-app": ("ghs_", (ALNUM, 36, 36)),
    "github-fine-grained-pat": ("github_pat_", (ALNUM + "_", 82, 82)),
    "gitlab-pat": ("glpat-", (URL_SAFE, 20, 20)),
    "hugging-face": ("hf_", (string.ascii_letters, 34, 34)),
    "openai": ("sk-proj-", (URL_SAFE, 48, 156)),
    "anthropic": ("sk-ant-api03-", (URL_SAFE, 93, 93), "AA"),
    "slack-bot": ("xoxb-", (string.digits, 10, 13), "-", (string.digits, 10, 13), "-", (ALNUM, 24, 24)),
    "aws-access-key-id": ("AKIA", (string.ascii_uppercase + string.digits, 16, 16)),
    "aws-secret-access-key": ((BASE64, 40, 40),),
    "gcp-api-key": ("AIza", (URL_SAFE, 35, 35)),
    "npm": ("npm_", (LOWER_ALNUM, 36, 36)),
    "pypi": ("pypi-AgEIcHlwaS5vcmc", (URL_SAFE, 50, 120)),
    "digitalocean-pat": ("dop_v1_", (HEX, 64, 64)),
    "stripe": ("sk_live_", (ALNUM, 10, 99)),
    "shopify": ("shpat_", (HEX, 32, 32)),
    "sendgrid": ("SG.", (URL_SAFE, 22, 22), ".", (URL_SAFE, 43, 43)),
    "databricks": ("dapi", (HEX, 32, 32)),
    "wandb": ((HEX, 40, 40),),
    "jwt": ("eyJ", (URL_SAFE, 17, 40), ".eyJ", (URL_SAFE, 17, 80), ".", (URL_SAFE, 20, 43)),
    "password": ((PASSWORD, 8, 40),),
}
# The words a key names a secret by (the generic rules' keywords), and the prefixes a name joins
# to one (HF_TOKEN, DB_PASSWORD, client_secret, GOOGLE_APPLICATION_CREDENTIALS).
KEY_WORDS = ("token", "key", "secret", "password", "passwd", "passphrase", "credentials", "creds", "auth",
             "api_key", "access_key", "auth_token", "private_key")
# words that name a secret only inside a longer name (DB_PASS): alone they are a word of their own
PREFIXED_WORDS = ("pass", "pwd")
KEY_PREFIXES = ("", "hf", "db", "my", "wandb", "client", "aws", "google_application", "pg", "mysql", "http", "x")
